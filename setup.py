"""mmsgg_eval: exact, distributed scene-graph and grounding evaluation for MMEngine / MMDetection 3.x."""
import os.path as osp

from setuptools import find_packages, setup


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
)
