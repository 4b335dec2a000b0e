"""The package's layout: every import of hvd_w2v's parts points one way, as each part's __init__.py states, and
the modules import one another in no cycle."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hvd_w2v"
# What each part may import of the others (hvd_w2v/README.md, "The parts, and which way they import"). The
# top level (the API, the command line, the pipeline, the tools' commands) and bench/ may import every part.
MAY_IMPORT = {
    "common": set(),
    "kernels": {"common"},
    "parallel": {"common", "kernels"},
    "text": {"common", "kernels", "parallel"},
    "training": {"common", "kernels", "parallel", "text"},
    "store": {"common", "kernels", "parallel", "text"},
    "queries": {"common", "kernels", "parallel", "text", "store"},
    "planning": {"common", "kernels", "parallel", "text", "training", "store", "queries"},
}
MATHS = ["training/sgns.py", "training/batches.py", "training/rng.py"]  # the ranks stay out of the maths


def imports():
    """{module (dotted, under hvd_w2v): the hvd_w2v modules it imports, at any depth of its code}."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        package = parts[:-1]  # a module's, or an __init__.py's own
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                if base.split(".")[0] != "hvd_w2v":
                    continue
                for alias in node.names:  # `from . import x` names a module where one exists
                    sub = PACKAGE.parent / (base + "." + alias.name).replace(".", "/")
                    is_module = sub.with_suffix(".py").exists() or (sub / "__init__.py").exists()
                    targets.add(base + "." + alias.name if is_module else base)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == "hvd_w2v")
        found[module] = targets
    return found


def part(module):
    """The part a dotted module belongs to: a subpackage's name, or None for the top level."""
    names = module.split(".")
    return names[1] if len(names) > 2 or (len(names) == 2 and names[1] in MAY_IMPORT) else None


def test_every_part_imports_only_the_parts_below_it():
    wrong = []
    for module, targets in imports().items():
        mine = part(module)
        if mine not in MAY_IMPORT:
            continue
        for target in targets:
            theirs = part(target)
            if theirs != mine and theirs not in MAY_IMPORT[mine]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_maths_takes_no_communicator_and_no_module_imports_another_in_a_circle():
    found = imports()
    for path in MATHS:
        module = "hvd_w2v." + path[:-3].replace("/", ".")
        assert not {t for t in found[module] if part(t) == "parallel"}, f"{module} imports the ranks"
    graph = {m: {t for t in ts if t in found and t != m} for m, ts in found.items()}
    state = {}

    def visit(m, trail):
        state[m] = "open"
        for t in graph[m]:
            assert state.get(t) != "open", "an import circle: " + " -> ".join(trail + [m, t])
            if t not in state:
                visit(t, trail + [m])
        state[m] = "done"
    for m in graph:
        if m not in state:
            visit(m, [])
