package frontend

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/codexec/codexec/wire"
)

// noModule matches the last line of the traceback of an import that found
// no module, as CPython prints it.
var noModule = regexp.MustCompile(`(?m)^ModuleNotFoundError: No module named '([A-Za-z_][A-Za-z0-9_.]*)'\s*$`)

// moduleDistributions names the distribution to install for modules whose
// import name is not their name on PyPI, the ones generated code imports
// most: a model that reads "No module named 'cv2'" and asks to install
// cv2 gets nothing.
var moduleDistributions = map[string]string{
	"cv2": "opencv-python", "sklearn": "scikit-learn", "skimage": "scikit-image", "PIL": "Pillow",
	"yaml": "PyYAML", "bs4": "beautifulsoup4", "dateutil": "python-dateutil", "dotenv": "python-dotenv",
	"jwt": "PyJWT", "Crypto": "pycryptodome", "serial": "pyserial", "docx": "python-docx",
	"pptx": "python-pptx", "fitz": "PyMuPDF", "magic": "python-magic", "OpenSSL": "pyOpenSSL",
	"attr": "attrs", "win32api": "pywin32", "git": "GitPython", "Bio": "biopython",
}

// missingModuleHint is a line for the text of a job that failed on an
// import its environment could not satisfy: what a model most often does
// next is install the package, and the name to ask for is not always the
// module's. "" for any other result.
func missingModuleHint(er ExecResult) string {
	if er.Status != string(wire.StatusError) {
		return ""
	}
	m := noModule.FindAllStringSubmatch(er.Stderr, -1)
	if len(m) == 0 {
		return ""
	}
	module := m[len(m)-1][1]
	top, _, _ := strings.Cut(module, ".")
	dist := top
	if d, ok := moduleDistributions[top]; ok {
		dist = d
	}
	return fmt.Sprintf("[hint: no module %q in this environment; if it is a package, install_dependencies with packages [%q] installs it, then run the code again]\n", module, dist)
}
