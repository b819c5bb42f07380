"""The bytecode pass of the Python runtime's build (scripts/python_runtime.sh), run by componentize-py as a
throwaway component before the real one. Its interpreter is the runtime's CPython 3.14, the only one that can
write that version's bytecode:

- importing the runtime imports numpy and plugins/python, whose directories are writable during a build, so
  CPython leaves their bytecode beside them (the real build then unmarshals instead of compiling, and its
  memory image keeps no compiler garbage);
- the standard library that the server mounts into every sandbox (given as the one other directory on the
  path that holds `compileall.py`) is compiled in place, with the path the sandbox shows it at, so a model's
  import of a module the image lacks (logging, asyncio, …) loads bytecode instead of compiling the source in
  every instance."""

import compileall
import os
import sys

from tessera_runtime import WitWorld  # noqa: F401  (the world's exports, which componentize-py looks for)

SANDBOX_STDLIB = "/python"

stdlib = next(path for path in sys.path
              if not path.startswith(SANDBOX_STDLIB) and os.path.isfile(os.path.join(path, "compileall.py")))
if not compileall.compile_dir(stdlib, ddir=SANDBOX_STDLIB, quiet=1):
    raise SystemExit(f"cannot compile the standard library in {stdlib}")
