"""The layout rules the package keeps (docs/architecture.md): short functions, modules of one concern (at most
500 lines unless the module says why it is one concern), no import cycle between its modules, imports that follow
the declared layers, and tools that import the installed package instead of editing ``sys.path``."""
import ast
import os
import os.path as osp
from typing import Dict, List, Set

import pytest

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
PACKAGE = osp.join(ROOT, 'mmsgg_eval')
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
#: The line of a module docstring that says why a module over MAX_MODULE_LINES is one concern.
ONE_CONCERN = 'One concern:'
#: Modules over MAX_MODULE_LINES that other branches are splitting: each entry goes once its split is merged (the
#: test below fails for an entry that no longer needs to be here).
KNOWN_LONG_MODULES = ()


def python_files(folder: str) -> List[str]:
    return sorted(osp.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith('.py'))


def module_name(path: str) -> str:
    rel = osp.relpath(path, ROOT)[:-3].replace(os.sep, '.')
    return rel[:-len('.__init__')] if rel.endswith('.__init__') else rel


def test_no_function_over_80_lines():
    long = []
    for path in python_files(PACKAGE):
        for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f'{osp.relpath(path, ROOT)}:{node.lineno} {node.name} ({lines} lines)')
    assert not long, 'functions over 80 lines:\n' + '\n'.join(long)


def long_module_without_reason(path: str) -> bool:
    """True for a module over :data:`MAX_MODULE_LINES` lines whose docstring has no line starting with
    :data:`ONE_CONCERN` (the reason it is not split)."""
    text = open(path, encoding='utf-8').read()
    if len(text.splitlines()) <= MAX_MODULE_LINES:
        return False
    doc = ast.get_docstring(ast.parse(text)) or ''
    return not any(line.strip().startswith(ONE_CONCERN) for line in doc.splitlines())


def test_no_module_over_500_lines_without_a_stated_reason():
    long = [osp.relpath(p, ROOT) for p in python_files(PACKAGE) if long_module_without_reason(p)]
    unexpected = [p for p in long if p not in KNOWN_LONG_MODULES]
    assert not unexpected, (f'modules over {MAX_MODULE_LINES} lines: split them by concern, or state why each is '
                            f'one concern in its docstring (a line starting with {ONE_CONCERN!r}): {unexpected}')
    stale = [p for p in KNOWN_LONG_MODULES if p not in long]
    assert not stale, f'no longer over {MAX_MODULE_LINES} lines without a reason, remove from KNOWN_LONG_MODULES: ' \
        f'{stale}'


def test_long_module_check_reads_the_length_and_the_docstring(tmp_path):
    body = 'x = 1\n' * MAX_MODULE_LINES
    short, long, reasoned, comment = (tmp_path / f'{n}.py' for n in ('short', 'long', 'reasoned', 'comment'))
    short.write_text('"""Short."""\n' + 'x = 1\n' * (MAX_MODULE_LINES - 1))
    long.write_text('"""Long."""\n' + body)
    reasoned.write_text(f'"""Long.\n\n{ONE_CONCERN} one table, one rule.\n"""\n' + body)
    comment.write_text(f'"""Long."""\n# {ONE_CONCERN} not in the docstring\n' + body)
    assert [long_module_without_reason(str(p)) for p in (short, long, reasoned, comment)] == \
        [False, True, False, True]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING') or \
        (isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING')


def module_imports(path: str, modules: Set[str]) -> Set[str]:
    """The package modules a module imports, at module level or inside its functions (a lazy import only moves
    a dependency to call time: two modules needing each other are still one design).
    ``from X import name`` counts as importing ``X.name`` when that is a module."""
    name = module_name(path)
    package = name if path.endswith('__init__.py') else name.rsplit('.', 1)[0]
    found = set()
    tree = ast.parse(open(path, encoding='utf-8').read())
    type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                 for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in type_only:  # annotations only: never imported at run time
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                base = '.'.join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f'{base}.{alias.name}' if f'{base}.{alias.name}' in modules else base)
    # a module's own ancestor packages are being imported already (Python imports them first)
    ancestors = {name.rsplit('.', n)[0] for n in range(1, name.count('.') + 1)}
    return {m for m in found if m in modules and m != name and m not in ancestors}


def test_no_import_cycle_between_package_modules():
    paths = python_files(PACKAGE)
    modules = {module_name(p) for p in paths}
    graph: Dict[str, Set[str]] = {module_name(p): module_imports(p, modules) for p in paths}
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    cycles: List[List[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            connect(module)
    assert not cycles, 'import cycles: ' + '; '.join(' <-> '.join(c) for c in cycles)


@pytest.mark.parametrize('tool', [p for p in python_files(osp.join(ROOT, 'tools'))], ids=lambda p: osp.basename(p))
def test_tools_do_not_edit_sys_path(tool):
    tree = ast.parse(open(tool, encoding='utf-8').read())
    edits = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == 'path'
             and isinstance(node.value, ast.Name) and node.value.id == 'sys']
    assert not edits, f'{osp.relpath(tool, ROOT)} uses sys.path at lines {edits}: import the installed package'



def declared_layers() -> List[List[str]]:
    """The ``layers`` block of docs/architecture.md: one line a layer, lowest first."""
    text = open(osp.join(ROOT, 'docs', 'architecture.md'), encoding='utf-8').read()
    start = text.index('```layers\n') + len('```layers\n')
    return [line.split() for line in text[start:text.index('```', start)].splitlines() if line.strip()]


def _unit(module: str) -> str:
    """The package or top-level module a module belongs to (``mmsgg_eval.metrics.base`` -> ``metrics``)."""
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else ''


def imports_against_layers(graph: Dict[str, Set[str]], layers: List[List[str]]) -> List[str]:
    """Each import of ``graph`` (module -> imported modules) that reaches the same or a higher layer in another
    unit, or ``testing`` from anywhere but ``benchmarks``; ``mmsgg_eval/__init__.py`` stands above all."""
    level = {unit: n for n, line in enumerate(layers) for unit in line}
    found = []
    for name in sorted(graph):
        unit = _unit(name)
        for dep in sorted(graph[name]):
            target = _unit(dep)
            if not unit or not target or target == unit:
                continue
            if level[target] >= level[unit] or (target == 'testing' and unit != 'benchmarks'):
                found.append(f'{name} ({unit}, layer {level[unit]}) imports {dep} ({target}, layer {level[target]})')
    return found


def test_imports_follow_the_declared_layers():
    layers = declared_layers()
    paths = python_files(PACKAGE)
    modules = {module_name(p) for p in paths}
    units = {_unit(m) for m in modules} - {''}
    declared = {unit for line in layers for unit in line}
    assert units <= declared, f'not in the layers block of docs/architecture.md: {sorted(units - declared)}'
    graph = {module_name(p): module_imports(p, modules) for p in paths}
    upward = imports_against_layers(graph, layers)
    assert not upward, 'imports against the layer order of docs/architecture.md:\n' + '\n'.join(upward)


def test_layer_check_finds_upward_and_fixture_imports():
    layers = declared_layers()
    graph = {'mmsgg_eval.functional.boxes': {'mmsgg_eval.metrics.base'},      # upward
             'mmsgg_eval.io.stream': {'mmsgg_eval.datasets.vg150'},           # same layer, another unit
             'mmsgg_eval.eval': {'mmsgg_eval.testing.sample_data'},           # a fixture outside benchmarks
             'mmsgg_eval.metrics.base': {'mmsgg_eval.functional.boxes', 'mmsgg_eval.metrics.accumulator'},
             'mmsgg_eval.benchmarks.offline': {'mmsgg_eval.testing.sample_data'},
             'mmsgg_eval': {'mmsgg_eval.benchmarks.offline'}}
    found = imports_against_layers(graph, layers)
    assert [f.split(' ')[0] for f in found] == ['mmsgg_eval.eval', 'mmsgg_eval.functional.boxes', 'mmsgg_eval.io.stream']
