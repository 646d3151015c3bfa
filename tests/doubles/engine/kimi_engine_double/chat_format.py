"""The Kimi chat formats the double speaks: the collection's own plugins/module_utils/_chat_format.py (the markup,
which parsers read it, the text a model writes), so the double and the accuracy gate share one declaration.

In the images build-image.sh copies that file into this package as _chat_format.py; from the repository the double
loads it from plugins/module_utils."""
import importlib.util
import os

try:
    from . import _chat_format as cf  # noqa: F401  (the images)
except ImportError:
    _PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "plugins", "module_utils",
                         "_chat_format.py")
    _SPEC = importlib.util.spec_from_file_location("kimi_engine_double._chat_format", _PATH)
    cf = importlib.util.module_from_spec(_SPEC)
    _SPEC.loader.exec_module(cf)
