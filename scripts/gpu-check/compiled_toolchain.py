# The compiled step's toolchain check (gpu-check/compiled.sh), in the venv's Python: the
# compilers, Python.h, safetensors and, on a GPU, CUDA_HOME, crt/ and libcuda.so, with the
# workarounds it sets (printed as "env"); exits 1 on a problem.
# argv: MODE BUNDLE_DIR WORK_DIR
import importlib.util, json, os, shutil, subprocess, sys, sysconfig
mode, here, work = sys.argv[1:4]
t = {"python": sys.version.split()[0], "cxx": shutil.which(os.environ.get("CXX") or "g++")}
cc = os.environ.get("CC")
t["cc"] = shutil.which(cc) if cc else (shutil.which("gcc") or shutil.which("clang"))
# Where Triton's build looks (triton/runtime/build.py: Debian's posix_local read as posix_prefix).
scheme = sysconfig.get_default_scheme()
include = sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]
t["python_h"] = os.path.exists(os.path.join(include, "Python.h"))
spec = importlib.util.find_spec("safetensors")
t["safetensors"] = os.path.dirname(spec.origin) if spec and spec.origin else None
problems, workarounds, env = [], [], {}
if not t["cxx"]:
    problems.append("no C++ compiler (CXX, else g++): AOTInductor builds its package with one")
if mode == "gpu" and not t["cc"]:
    problems.append("no C compiler (CC, else gcc or clang): Triton builds its launcher with one")
if mode == "gpu" and not t["python_h"]:
    problems.append(f"no Python.h in {include}: Triton's launcher includes it")
if not t["safetensors"]:
    problems.append("no safetensors for the venv's Python (the compile script reads the weights with it), and none in the bundle (pylib/)")
if mode == "gpu":
    # AOTInductor's CUDA package is built with CUDA's headers and -lcuda: the CUDA_HOME that
    # torch.utils.cpp_extension finds (CUDA_HOME or CUDA_PATH, nvcc's, /usr/local/cuda),
    # crt/ among its headers (cuda_runtime_api.h includes crt/host_defines.h), and libcuda.so
    # where the linker looks. Where the host lacks one, this step works round it and says
    # so (a Gradless server compiling on this host would need the same).
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    source = "env" if home else None
    if not home and shutil.which("nvcc"):
        home, source = os.path.dirname(os.path.dirname(shutil.which("nvcc"))), "nvcc"
    if not home and os.path.exists("/usr/local/cuda"):
        home, source = "/usr/local/cuda", "/usr/local/cuda"
    if not home:
        torch_spec = importlib.util.find_spec("torch")
        site = os.path.dirname(list(torch_spec.submodule_search_locations)[0]) if torch_spec else ""
        wheel = os.path.join(site, "nvidia", "cu13")
        if os.path.exists(os.path.join(wheel, "include", "cuda_runtime_api.h")):
            home, source = wheel, "the torch wheel's nvidia/cu13"
            env["CUDA_HOME"] = home
            workarounds.append(f"no CUDA toolkit (CUDA_HOME, nvcc, /usr/local/cuda): CUDA_HOME set to {wheel}")
        else:
            problems.append("no CUDA toolkit for AOTInductor's CUDA build (CUDA_HOME, nvcc, /usr/local/cuda), nor the torch wheel's nvidia/cu13")
    t["cuda_home"], t["cuda_home_from"] = home, source
    if home:
        t["crt"] = os.path.exists(os.path.join(home, "include", "crt", "host_defines.h"))
        if not t["crt"]:
            carried = os.path.join(here, "cuda", "include")
            if os.path.exists(os.path.join(carried, "crt", "host_defines.h")):
                env["CPLUS_INCLUDE_PATH"] = ":".join(p for p in (carried, os.environ.get("CPLUS_INCLUDE_PATH")) if p)
                workarounds.append(f"no crt/ headers in {home}/include: the bundle's (cuda/include/crt) put on CPLUS_INCLUDE_PATH")
            else:
                problems.append(f"no crt/ headers in {home}/include (cuda_runtime_api.h includes crt/host_defines.h), none in the bundle")
    if t["cxx"]:
        def linker_finds(name):
            found = subprocess.run([t["cxx"], f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
            return found if os.path.isabs(found) else None
        # The driver's library is often outside the linker's own paths on a GPU host: in
        # LD_LIBRARY_PATH (where the loader finds it), /usr/local/nvidia/lib64 (the
        # container runtime's mount) or the toolkit's stubs.
        dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d] + ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"]
        if home:
            dirs += [os.path.join(home, "lib64"), os.path.join(home, "lib64", "stubs"), os.path.join(home, "lib", "stubs")]
        def in_dirs(name):
            return next((os.path.join(d, name) for d in dirs if os.path.exists(os.path.join(d, name))), None)
        def ldconfig_finds(name):
            ldconfig = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout if os.path.exists("/sbin/ldconfig") else ""
            return next((l.split()[-1] for l in ldconfig.splitlines() if f"{name} " in l), None)
        t["libcuda_searched"] = ["the linker's paths", *dirs, "ldconfig -p"]
        t["libcuda_so"] = linker_finds("libcuda.so")
        if not t["libcuda_so"]:
            so1 = linker_finds("libcuda.so.1") or in_dirs("libcuda.so") or in_dirs("libcuda.so.1") or ldconfig_finds("libcuda.so.1")
            if so1:
                link = os.path.join(work, "cuda-link")
                os.makedirs(link, exist_ok=True)
                os.symlink(so1, os.path.join(link, "libcuda.so"))
                env["LIBRARY_PATH"] = ":".join(p for p in (link, os.environ.get("LIBRARY_PATH")) if p)
                workarounds.append(f"no libcuda.so where the linker looks ({so1} found): a link to it put on LIBRARY_PATH")
            else:
                problems.append("no libcuda.so or libcuda.so.1 (the driver's) for AOTInductor's -lcuda, in: " + ", ".join(t["libcuda_searched"]))
t.update(workarounds=workarounds, env=env, problems=problems)
print(json.dumps(t))
sys.exit(1 if problems else 0)
