"""Prints a pyconfig.h for componentize-py's CPython 3.14 (wasm32-wasip2), which ships no headers.

    wasi_pyconfig.py SYSCONFIGDATA REFERENCE_PYCONFIG_H > pyconfig.h

The values come from componentize-py's `_sysconfigdata__wasi_wasm32-wasi.py` (what its CPython was configured
with); which names belong in the header comes from a reference pyconfig.h of the same CPython version (Debian's,
for another architecture) plus every HAVE_/SIZEOF_/ALIGNOF_/WITH_/Py_ name sysconfig records. sysconfig does
not record the feature-test macros every pyconfig.h defines, so they are added (without them wasi-libc hides
`fdopen` and friends)."""

import re
import runpy
import sys

FEATURE_MACROS = """#ifndef _ALL_SOURCE
# define _ALL_SOURCE 1
#endif
#ifndef _GNU_SOURCE
# define _GNU_SOURCE 1
#endif
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#define _XOPEN_SOURCE_EXTENDED 1
#define _LARGEFILE_SOURCE 1"""


def pyconfig(variables, reference):
    names = set(re.findall(r"^\s*(?:#define|/\*\s*#undef|#undef)\s+([A-Za-z_][A-Za-z0-9_]*)", reference, re.M))
    names |= {name for name in variables if re.match(r"(HAVE_|SIZEOF_|ALIGNOF_|WITH_|Py_|PY_)", name)}
    lines = ["/* pyconfig.h of componentize-py's CPython 3.14 (wasm32-wasip2), made from its sysconfig data */",
             "#ifndef Py_PYCONFIG_H", "#define Py_PYCONFIG_H"]
    for name in sorted(names & set(variables)):
        value = variables[name]
        if isinstance(value, int):
            defined = value or name.startswith(("SIZEOF_", "ALIGNOF_"))
            lines.append(f"#define {name} {value}" if defined else f"/* #undef {name} */")
        elif name in reference:
            lines.append(f"#define {name} {value}")
    return "\n".join(lines + [FEATURE_MACROS, "#endif"]) + "\n"


if __name__ == "__main__":
    sysconfigdata, reference = sys.argv[1:3]
    sys.stdout.write(pyconfig(runpy.run_path(sysconfigdata)["build_time_vars"], open(reference).read()))
