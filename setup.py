"""Builds torchtpu._C with CMake against the installed torch (see CMakeLists.txt)."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
RUNTIME_PACKAGES = ("torch", "xla-cpu-pjrt", "numpy")
# `pip install torchtpu[hf]`: the Hugging Face versions docs/huggingface.md was measured with.
HF_PACKAGES = ("transformers", "accelerate", "diffusers", "safetensors", "tokenizers")
# `pip install torchtpu[tpu]`: libtpu, the TPU plugin; torchtpu.aot also compiles with it on a host without a TPU.
TPU_PACKAGES = ("libtpu",)
# `pip install torchtpu[kernels]`: JAX, to write custom kernels (Pallas) as torch ops (torchtpu.kernels).
KERNEL_PACKAGES = ("jax", "jaxlib")


def runtime_requirements(packages=RUNTIME_PACKAGES):
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        pins = [line.split("#")[0].strip() for line in f]
    return [pin for pin in pins if pin and pin.split("==")[0] in packages]


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.join(ROOT, "build")
        if not os.path.exists(os.path.join(build_dir, "build.ninja")):
            subprocess.check_call(
                ["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", f"-DPython3_EXECUTABLE={sys.executable}"]
            )
        subprocess.check_call(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 2)])
        built = glob.glob(os.path.join(build_dir, "_C*.so"))
        if not built:
            raise RuntimeError("CMake did not produce the _C extension")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)
        # torchtpu.aot's child process travels with the package.
        tool = os.path.join(build_dir, "torchtpu_aot_compile")
        if os.path.exists(tool):
            shutil.copy2(tool, os.path.join(os.path.dirname(target), "torchtpu_aot_compile"))


setup(
    name="torchtpu",
    version="0.1.0",
    description="Google TPUs (and any PJRT device) as the PyTorch device 'tpu'",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[Extension("torchtpu._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=runtime_requirements(),
    entry_points={"console_scripts": ["torchtpu = torchtpu.__main__:main"]},  # `torchtpu demo`
    extras_require={"hf": runtime_requirements(HF_PACKAGES), "tpu": runtime_requirements(TPU_PACKAGES),
                    "kernels": runtime_requirements(KERNEL_PACKAGES)},
    python_requires=">=3.10",
)
