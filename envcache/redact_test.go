package envcache

import "testing"

// Every way an index or channel URL carries a credential is hidden, and the
// rest of the text is left as it was.
func TestRedactURLs(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"--index-url https://alice:s3cret@pypi.example/simple", "--index-url https://***@pypi.example/simple"},
		{"http://tok@h/simple and https://u:p@h2/x", "http://***@h/simple and https://***@h2/x"},
		{"-c https://conda.example/t/tk-9a8b7c/my-channel", "-c https://conda.example/t/***/my-channel"},
		{"https://conda.example/t/tk-9a8b7c", "https://conda.example/t/***"},
		{"https://h/simple?token=abc&x=1", "https://h/simple?token=***&x=1"},
		{"https://h/simple?x=1&API_KEY=abc#frag", "https://h/simple?x=1&API_KEY=***#frag"},
		{"no url here, t/abc and user@host", "no url here, t/abc and user@host"},
		{"https://pypi.org/simple/numpy/", "https://pypi.org/simple/numpy/"},
		{"https://h/a/t/b", "https://h/a/t/b"},
	} {
		if got := RedactURLs(c.in); got != c.want {
			t.Errorf("RedactURLs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
