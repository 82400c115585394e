# codexec rich output: what a job displays, as pictures and text.
#
# The zygote (zygote.py) compiles this file once, from the _RICHOUT_SOURCE the
# worker sends before its own source, into a module of its own, and calls job_start() in each
# job's process before the job's code runs and job_end() after it, before the
# interpreter's shutdown steps. Nothing here runs unless the worker gave the
# job a display directory (CODEXEC_DISPLAY_DIR, a directory of the job's
# working directory that the job itself makes on its first picture; taken out
# of the environment, so that the job's os.environ and its children's hold no
# setting of codexec's).
#
# A picture is a PNG file in that directory, named by its order (0001.png,
# ...). The worker reads them once the job is over, as untrusted files: it
# takes regular files of that name only, checks the PNG signature and its
# limits (count, size), and says which it left out. What the job prints is
# never parsed: output cannot make a picture, nor a picture output.
#
# Three ways a job makes one:
#   - matplotlib: plt.show() saves every open figure and closes it (as a
#     notebook does), and figures still open when the code ends are saved
#     then. The backend is Agg (MPLBACKEND, set by the worker): nothing needs
#     a display. pyplot is patched when it is imported, by a finder on
#     sys.meta_path, so a job that never imports it pays nothing.
#   - display(obj), a builtin: a picture for an object that has one
#     (_repr_png_, a matplotlib figure, a PIL image, PNG bytes), else text on
#     stdout (_repr_markdown_, a pandas object's text form, repr, or the text
#     of _repr_html_ when repr says nothing).
#   - writing a PNG into the directory itself is the same as display.

import builtins
import os
import sys

_PNG = b'\x89PNG\r\n\x1a\n'
_MAX_FILES = 100  # what a job may leave; the worker's limits are lower
_dir = None
_count = 0


def job_start():
    """Called in the job's process, before its code: the display builtin
    and the pyplot hook, when the worker gave the job a display directory."""
    global _dir
    _dir = os.environ.pop('CODEXEC_DISPLAY_DIR', None) or None
    if _dir is None:
        return
    builtins.display = display
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is not None:
        _patch_pyplot(plt)
    else:
        sys.meta_path.insert(0, _PyplotFinder())


def job_end():
    """Called after the job's code: figures left open are shown."""
    if _dir is None:
        return
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is not None:
        try:
            _show_figures(plt)
        except Exception as e:
            _note('codexec: open figures not shown: %s: %s' % (type(e).__name__, e))


def display(*objs):
    """Show each object: a picture when it has one, else text."""
    for obj in objs:
        png = _png_of(obj)
        if png is not None:
            _save_png(png)
        else:
            text = _text_of(obj)
            if text is not None:
                print(text)


def _png_of(obj):
    if isinstance(obj, (bytes, bytearray)) and bytes(obj[:8]) == _PNG:
        return bytes(obj)
    mpl_fig = _figure_of(obj)
    if mpl_fig is not None:
        png = _figure_png(mpl_fig)
        plt = sys.modules.get('matplotlib.pyplot')
        if plt is not None:
            plt.close(mpl_fig)  # shown: not again when the code ends
        return png
    rp = getattr(type(obj), '_repr_png_', None)
    if rp is not None:
        data = rp(obj)
        if isinstance(data, tuple):  # (data, metadata), as IPython allows
            data = data[0]
        if isinstance(data, (bytes, bytearray)) and bytes(data[:8]) == _PNG:
            return bytes(data)
    if type(obj).__module__.startswith('PIL.') and hasattr(obj, 'save'):
        import io

        buf = io.BytesIO()
        obj.save(buf, format='PNG')
        return buf.getvalue()
    return None


def _figure_of(obj):
    """obj as a matplotlib Figure, if it is one (or an Axes of one)."""
    if 'matplotlib.figure' not in sys.modules:
        return None
    from matplotlib.figure import Figure

    if isinstance(obj, Figure):
        return obj
    fig = getattr(obj, 'figure', None)
    if isinstance(fig, Figure) and hasattr(obj, 'plot'):
        return fig
    return None


def _figure_png(fig):
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format='png', bbox_inches='tight')
    return buf.getvalue()


def _text_of(obj):
    md = getattr(type(obj), '_repr_markdown_', None)
    if md is not None:
        text = md(obj)
        if isinstance(text, tuple):
            text = text[0]
        if isinstance(text, str):
            return text
    if type(obj).__module__.startswith('pandas.') and hasattr(obj, 'to_string'):
        try:
            return obj.to_string(max_rows=60, max_cols=20)
        except TypeError:  # a Series: no max_cols
            return obj.to_string(max_rows=60)
    text = repr(obj)
    html = getattr(type(obj), '_repr_html_', None)
    if html is not None and text.startswith('<') and ' object at 0x' in text:
        h = html(obj)
        if isinstance(h, str):
            return _strip_tags(h)
    return text


def _strip_tags(html):
    import html as _html
    import re

    text = re.sub(r'(?is)<(script|style)\b.*?</\1>', '', html)
    text = re.sub(r'(?i)<br\s*/?>|</(p|div|tr|h[1-6]|li)>', '\n', text)
    text = re.sub(r'(?i)</t[dh]>', '\t', text)
    text = _html.unescape(re.sub(r'<[^>]*>', '', text))
    return '\n'.join(line.rstrip() for line in text.splitlines() if line.strip())


def _save_png(data):
    global _count
    if _count >= _MAX_FILES:
        _count += 1
        return
    try:
        os.makedirs(_dir, mode=0o700, exist_ok=True)
        _count += 1
        with open(os.path.join(_dir, '%04d.png' % _count), 'xb') as f:
            f.write(data)
    except OSError as e:
        _note('codexec: picture not kept: %s' % e)


def _note(msg):
    try:
        sys.stderr.write(msg + '\n')
    except Exception:
        pass


def _show_figures(plt):
    for num in plt.get_fignums():
        fig = plt.figure(num)
        try:
            _save_png(_figure_png(fig))
        finally:
            plt.close(fig)


def _patch_pyplot(plt):
    if getattr(plt.show, '_codexec', False):
        return

    def show(*args, **kwargs):
        """Show every open figure as a picture of the call's result, and
        close it (codexec: the backend is Agg, nothing opens a window)."""
        _show_figures(plt)

    show._codexec = True
    plt.show = show


class _PyplotFinder:
    """Patches matplotlib.pyplot once it is imported; finds nothing else."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != 'matplotlib.pyplot':
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, 'exec_module', None)
        if exec_module is None:
            return spec

        def exec_then_patch(module):
            exec_module(module)
            _patch_pyplot(module)

        loader.exec_module = exec_then_patch
        return spec
