"""A checkout of ascendscope imported as the package itself.

Python puts the folder it starts in (or the script's folder) first on ``sys.path``, before the installed package:
started in the folder above a clone named ``ascendscope``, ``import ascendscope`` finds the clone. Without this
file that would be an empty namespace package (``module 'ascendscope' has no attribute 'open'``); with it, the
clone is the package as pyproject.toml's ``package-dir`` lays it out: ``pyapi/`` is ``ascendscope`` itself and the
other folders are its subpackages. An installed ascendscope does not contain this file.
"""

from pathlib import Path as _Path

_ROOT = _Path(__file__).resolve().parent
__path__ = [str(_ROOT / "pyapi"), str(_ROOT)]  # ascendscope.run from pyapi/, ascendscope.server from server/, …
_INIT = _ROOT / "pyapi" / "__init__.py"
exec(compile(_INIT.read_bytes(), str(_INIT), "exec"))  # the package's own __init__, run as this module
