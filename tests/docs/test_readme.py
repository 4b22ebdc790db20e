"""Every shell command of the README runs as written.

Each ```bash block of README.md is preceded by a marker line: ``<!-- runnable -->`` (run here, in order, in a
scratch folder that sees the checkout's ``configs/`` and ``tools/``, on the sample data the first block writes)
or ``<!-- not-runnable-in-tests: REASON -->`` (installs packages, needs a checkpoint or GPUs, or is a template
with the user's own file names). An unmarked block fails the test, so a new command is either run or explicitly
excused.
"""
import os
import re
import subprocess
import sys

import pytest

from tests.tool_runs import ROOT

MARK_RUN = '<!-- runnable -->'
MARK_SKIP = re.compile(r'<!-- not-runnable-in-tests: (\S.*\S) -->')


def readme_blocks():
    """(marker line, block text, line number) of every ```bash block of the README."""
    lines = open(os.path.join(ROOT, 'README.md')).read().split('\n')
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == '```bash':
            start = i
            j = i + 1
            while lines[j].strip() != '```':
                j += 1
            before = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), '')
            blocks.append((before, '\n'.join(lines[start + 1:j]), start + 1))
            i = j
        i += 1
    return blocks


def test_every_shell_block_is_marked():
    blocks = readme_blocks()
    assert len(blocks) >= 6
    unmarked = [line for marker, _, line in blocks if marker != MARK_RUN and not MARK_SKIP.fullmatch(marker)]
    assert not unmarked, f'README.md: ```bash blocks at lines {unmarked} need a runnable / not-runnable marker'
    assert sum(marker == MARK_RUN for marker, _, _ in blocks) >= 4


def test_quick_start_keeps_the_ci_command():
    """.ci/run runs the README's quick-start test command; they must stay the same."""
    command = 'bash tools/setup_env.sh && python3 -m pytest -q tests'
    assert command in open(os.path.join(ROOT, 'README.md')).read()
    assert command in open(os.path.join(ROOT, '.ci', 'run')).read()


def test_runnable_blocks_run_as_written(tmp_path):
    for name in ('configs', 'tools'):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    bin_dir = tmp_path / '.bin'
    bin_dir.mkdir()
    for name in ('python', 'python3'):  # the interpreter running the tests, under the README's names
        os.symlink(sys.executable, bin_dir / name)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1',
               PATH=str(bin_dir) + os.pathsep + os.environ.get('PATH', ''))
    ran = 0
    for marker, block, line in readme_blocks():
        if marker != MARK_RUN:
            continue
        proc = subprocess.run(['bash', '-euo', 'pipefail', '-c', block], cwd=str(tmp_path), env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f'README.md line {line}:\n{block}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}'
        ran += 1
    assert ran >= 4
    assert (tmp_path / 'work_dirs' / 'quick' / 'metrics.json').exists()
    assert (tmp_path / 'work_dirs' / 'report' / 'index.html').exists()
    assert (tmp_path / 'work_dirs' / 'from_state' / 'metrics.json').exists()


@pytest.mark.parametrize('doc', ['README.md', 'docs/usage.md', 'docs/formats.md', 'docs/performance.md'])
def test_links_to_docs_resolve(doc):
    """Relative links of the user-facing pages point to files that exist, and their #anchors to headings."""
    path = os.path.join(ROOT, doc)
    text = open(path).read()
    for target in re.findall(r'\]\(([^)#\s]+\.md)(#[^)]+)?\)', text):
        file, anchor = target
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file))
        assert os.path.isfile(resolved), f'{doc}: link to {file}'
        if anchor:
            headings = [re.sub(r'[^\w\- ]', '', h.strip().lower()).replace(' ', '-')
                        for h in re.findall(r'^#+ (.*)$', open(resolved).read(), re.M)]
            assert anchor[1:] in headings, f'{doc}: anchor {anchor} not in {file}'
