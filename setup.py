"""mmsgg_eval: exact, distributed scene-graph and grounding evaluation for MMEngine / MMDetection 3.x."""
import os
import os.path as osp
import warnings

from setuptools import find_packages, setup


def compiled_extensions() -> dict:
    """The optional compiled CPU kernels (``mmsgg_eval._ext``, mmsgg_eval/csrc/): built with torch's C++
    extension tools when torch is importable at build time (``pip install --no-build-isolation``); a failed
    build only warns, and mmsgg_eval then runs its torch implementation of the same operations (same numbers).
    ``MMSGG_EVAL_WITH_OPS=0`` skips the build."""
    if os.environ.get('MMSGG_EVAL_WITH_OPS', '1') == '0':
        return {}
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        warnings.warn('torch is not importable at build time: mmsgg_eval is installed without its compiled '
                      'kernels (install torch first and use --no-build-isolation to build them)')
        return {}

    class OptionalBuildExtension(BuildExtension):
        def build_extension(self, ext):
            try:
                super().build_extension(ext)
            except Exception as err:  # noqa: BLE001 - any compiler failure leaves the torch implementation
                warnings.warn(f'building {ext.name} failed ({err}); mmsgg_eval runs without its compiled kernels')

    sources = ['scores.cpp', 'ranking.cpp', 'ngc.cpp', 'first_hits.cpp', 'padding.cpp', 'detection.cpp', 'oi.cpp',
               'recall.cpp', 'bindings.cpp']  # common.h
    extension = CppExtension(
        'mmsgg_eval._ext', [osp.join('mmsgg_eval', 'csrc', name) for name in sources],
        extra_compile_args=['-O3', '-fopenmp', '-ffp-contract=off'], extra_link_args=['-fopenmp'],
        depends=[osp.join('mmsgg_eval', 'csrc', 'common.h')])
    return dict(ext_modules=[extension], cmdclass={'build_ext': OptionalBuildExtension.with_options(use_ninja=False)})


def read_version() -> str:
    namespace: dict = {}
    with open(osp.join(osp.dirname(__file__), 'mmsgg_eval', 'version.py')) as f:
        exec(f.read(), namespace)
    return namespace['__version__']


setup(
    name='mmsgg_eval',
    version=read_version(),
    description='Exact, GPU-batched, distributed evaluation of scene graph generation '
                'and visual grounding for MMEngine / MMDetection 3.x',
    long_description=open('README.md').read() if osp.exists('README.md') else '',
    long_description_content_type='text/markdown',
    packages=find_packages(exclude=('tests', 'tools', 'configs')),
    python_requires='>=3.8',
    install_requires=[
        'torch>=1.13',
        'numpy',
        'mmengine>=0.10.0',
        'h5py',
        'pillow',
    ],
    extras_require={
        # MMDetection pipeline path (needs mmcv with compiled ops, see tools/setup_env.sh).
        'mmdet': ['mmdet>=3.0.0,<3.4.0'],
        'vlm': ['pycocotools'],
        'reports': ['matplotlib'],
        'clip': ['open_clip_torch>=3.0'],
        'hf': ['transformers>=5.0'],
        'tests': ['pytest', 'pycocotools', 'matplotlib'],
    },
    license='Apache License 2.0',
    zip_safe=False,
    **compiled_extensions(),
)
