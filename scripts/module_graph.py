"""The top-level module graph of src/ (which module refers to which, from `crate::<module>` paths outside
tests) and its cycles. Exits 1 if there is a cycle: `scripts/dev test` runs it, so an import circle between
layers cannot come back unnoticed.

  python3 scripts/module_graph.py [src]
"""

import pathlib
import re
import sys


def graph(root):
    edges = {}
    for path in root.rglob("*.rs"):
        module = path.relative_to(root).parts[0].removesuffix(".rs")
        if module in ("lib", "main"):
            continue
        code = path.read_text().split("#[cfg(test)]")[0]
        for used in re.findall(r"crate::([a-z_]+)", code):
            if used != module:
                edges.setdefault(module, set()).add(used)
    return edges


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for used in edges.get(module, ()):
            if used not in index:
                visit(used)
                low[module] = min(low[module], low[used])
            elif used in on_stack:
                low[module] = min(low[module], index[used])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(set(edges) | {m for used in edges.values() for m in used}):
        if module not in index:
            visit(module)
    return found


def main():
    edges = graph(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src"))
    for module in sorted(edges):
        print(f"{module:15} -> {', '.join(sorted(edges[module]))}")
    found = cycles(edges)
    print("cycles:", found or "none")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
