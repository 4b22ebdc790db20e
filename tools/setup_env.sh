#!/usr/bin/env bash
# Installs the full mmsgg_eval stack into the current Python environment, idempotently:
# torch 2.9.1 (CPU or CUDA wheel from the registry), mmcv 2.1.0 with compiled ops (built from the
# sdist when no wheel is cached; ~12 min on 2 cores, then pip reuses the cached wheel), mmengine,
# mmdet 3.3.0, the evaluation extras, and mmsgg_eval itself in editable mode.
# --with-browser (opt-in): also a headless Chromium + selenium for the report's browser test
# (tools/install_browser.sh; without it that test is skipped).
# --offline: only what evaluating saved predictions needs (the light path, no compiler run but our kernels'):
# torch (kept when one is installed, else 2.9.1), mmengine, mmcv-lite 2.1.0 (mmcv without compiled ops; skipped
# when an mmcv is installed), mmdet 3.3.0 (its registries; its models need the full mmcv and are not used),
# pycocotools, h5py, matplotlib and mmsgg_eval (editable, with its CPU kernels). No mmcv build, no CLIP packages.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_BROWSER=0
OFFLINE=0
for arg in "$@"; do
    case "$arg" in
        --with-browser) WITH_BROWSER=1 ;;
        --offline) OFFLINE=1 ;;
        *) echo "tools/setup_env.sh: unknown option $arg (known: --offline, --with-browser)" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

have() { "$PY" - "$@" <<'PYEOF' >/dev/null 2>&1
import importlib, sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, _, want = spec.partition('==')
    if want and version(name) != want:
        sys.exit(1)
    if not want:
        version(name)
PYEOF
}

install_package() {  # mmsgg_eval (editable); also builds the compiled CPU kernels (mmsgg_eval/csrc/)
    echo "[setup] mmsgg_eval (editable)"
    pip_install --no-deps --no-build-isolation -e .
    if "$PY" -c "import sys; from mmsgg_eval.functional import compiled; sys.exit(0 if compiled.built() else 1)"; then
        echo "[setup] compiled CPU score kernels: built"
    else
        echo "[setup] WARNING: the compiled CPU score kernels were not built (no C++ compiler?); the torch implementation runs instead (same numbers, slower)"
    fi
}

if [ "$OFFLINE" = 1 ]; then
    echo "[setup] light path for offline evaluation (no mmcv build, no mmdet models)"
    have torch || pip_install "torch==2.9.1" "numpy<2"
    pip_install "numpy<2" "setuptools<70" wheel
    if ! have mmcv; then
        pip_install "mmcv-lite==2.1.0"
    fi
    have mmengine==0.10.7 mmdet==3.3.0 pycocotools h5py matplotlib || \
        pip_install "mmengine==0.10.7" "mmdet==3.3.0" pycocotools h5py matplotlib "numpy<2"
    install_package
    echo "[setup] done (offline evaluation: python -m mmsgg_eval.eval CONFIG PREDICTIONS; tools/test.py needs the full install)"
    exit 0
fi

echo "[setup] torch/torchvision"
have torch==2.9.1 torchvision==0.24.1 || pip_install "torch==2.9.1" "torchvision==0.24.1" "numpy<2"
echo "[setup] build tools"
pip_install "numpy<2" "setuptools<70" wheel ninja
echo "[setup] mmcv 2.1.0 with compiled ops"
if ! "$PY" -c "import mmcv, mmcv._ext; assert mmcv.__version__ == '2.1.0'" >/dev/null 2>&1; then
    "$PY" -m pip uninstall -y -q mmcv-lite >/dev/null 2>&1 || true
    echo "[setup]   building mmcv from source (first time only, ~12 min on 2 cores)"
    MMCV_WITH_OPS=1 FORCE_CUDA=${FORCE_CUDA:-0} MAX_JOBS=${MAX_JOBS:-2} \
        pip_install "mmcv==2.1.0" --no-build-isolation
fi
echo "[setup] mmengine, mmdet, extras"
have mmengine==0.10.7 mmdet==3.3.0 pycocotools h5py matplotlib pytest || \
    pip_install "mmengine==0.10.7" "mmdet==3.3.0" pycocotools h5py matplotlib pytest "numpy<2"
echo "[setup] CLIP-family encoders for RelCLIPScore (optional extras, tested versions)"
have open_clip_torch==3.3.0 transformers==5.24.0 || pip_install "open_clip_torch==3.3.0" "transformers==5.24.0" "numpy<2"
install_package
if [ "$WITH_BROWSER" = 1 ]; then
    PYTHON="$PY" bash tools/install_browser.sh
fi
echo "[setup] done"
