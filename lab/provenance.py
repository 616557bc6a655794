"""Which code and which machine a run's numbers came from: what config.json records beside its flags.

    python lab/provenance.py                 # the source files a run imports, and which differ from the commit

Three things besides the flags change a run's numbers, and each is recorded so that a run is never
taken for another:
- the code: `code_record` hashes each source file a run imports (train.py and every project module it
  reaches through its imports; not tests/ or docs/), and lists those that differ from the git commit.
  experiments.py compares the hashes with the working tree's before it skips or resumes a run
  (`code_changes`): one curve comes from one version of the code;
- the machine (`machine`): its CPU and the widest vector instructions PyTorch uses there;
- the rounding (`ROUNDINGS`): on one machine, the order in which floats are summed changes with the
  threads and with the vector width PyTorch's kernels are held to. A learner's machine rounds in some
  other order; running a lesson under two or three roundings on one machine shows how much of a result
  survives that (EXPERIMENTS.md).
This file imports nothing of the project's, and torch only where a function asks the machine.
"""
import ast
import hashlib
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project's folder
ENTRY = "train.py"  # what a run executes; everything it imports follows from it
FOLDERS = ("kernels", "lab", "book", "harness")  # the folders of the project's code, beside the top-level files
# the files that moved into folders, where they were: a run that recorded these ran the code from before the move
MOVED = {f"{name}.py": f"{folder}/{name}.py" for folder, names in (
    ("lab", ("lessons", "report", "provenance", "run_folders")), ("book", ("qwen3", "math_grader", "reference")),
    ("harness", ("cli", "stats", "evaluation", "sft", "distributed"))) for name in names}


# ---------------------------------------------------------------- the code

def source_files(entry=ENTRY, root=ROOT):
    """The project's source files a run of `entry` imports, as paths relative to root, sorted: entry, and
    each project module named by an import anywhere in a file already found (inside functions too, so a
    module imported only when a flag asks for it counts). Imports of other packages (torch) are not files
    of the project."""
    found, todo = set(), [entry]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        with open(os.path.join(root, path), encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        package = os.path.dirname(path).replace(os.sep, ".")
        for node in ast.walk(tree):
            for name in imported_names(node, package):
                module = module_file(name, root)
                if module is not None:
                    todo.append(module)
    return sorted(found)


def imported_names(node, package):
    """The module names an import statement can load: `import a.b` -> a, a.b; `from a import b` -> a, a.b
    (b may be a module of package a); `from .x import y` inside package p -> p.x, p.x.y."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the importing file's package
            base = ".".join(filter(None, [package, base]))
        names = [base] + [f"{base}.{alias.name}" for alias in node.names]
    else:
        return []
    out = []
    for name in names:
        parts = name.split(".")
        out += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [n for n in out if n]


def module_file(name, root=ROOT):
    """The project file that module `name` is (a.b -> a/b.py, or a/b/__init__.py), or None."""
    base = os.path.join(*name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(os.path.join(root, path)):
            return path.replace(os.sep, "/")
    return None


def file_hash(path, root=ROOT):
    """The first 16 hex digits of a file's sha256, or None where the file is gone."""
    try:
        with open(os.path.join(root, path), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except FileNotFoundError:
        return None


def code_record(root=ROOT):
    """What config.json keeps of the code a run ran: {"files": {path: hash}, "edited": [the paths that differ
    from the git commit, or are not in it]}; "edited" is None outside a git checkout."""
    files = source_files(root=root)
    return {"files": {path: file_hash(path, root) for path in files}, "edited": edited_files(files, root)}


def edited_files(paths, root=ROOT):
    """The paths among `paths` whose contents differ from the git commit (staged or not), or that git does
    not track; None outside a git checkout."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *paths], cwd=root,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return sorted(line[3:].strip().split(" -> ")[-1] for line in out.stdout.splitlines() if line.strip())


def code_changes(config, root=ROOT):
    """What differs between the code a run ran (its config.json, as a dict) and the working tree's: [] where
    they agree, else the source files edited, added to what a run imports, or removed since. A run older than
    this record has only its commit: the same commit with neither side edited agrees, anything else is
    ['commit X'], which changes_text words."""
    recorded = config.get("code")
    if not recorded or "files" not in recorded:
        commit, now = config.get("commit"), code_commit(root)
        same = commit and commit == now and not commit.endswith("+changes")
        return [] if same else [f"commit {commit}"]
    now = set(source_files(root=root))
    paths = sorted(now | set(recorded["files"]))
    return [p for p in paths if recorded["files"].get(p) != (file_hash(p, root) if p in now else None)]


def changes_text(changed):
    """code_changes' list in words: 'grpo.py changed since it ran'; for a run that recorded only its commit, 'it ran
    commit X, whose files were not recorded'; for a run of the code before its files moved into folders, that (its
    log-probs on a CPU were then the fused kernels', whose numbers differ from today's textbook path in the last
    bits: another code's)."""
    if len(changed) == 1 and changed[0].startswith("commit "):
        return f"it ran {changed[0]}, whose files were not recorded"
    if set(changed) & set(MOVED):
        return ("it ran the code from before its files moved into lab/, book/ and harness/, whose log-probs on a CPU "
                "came from the fused kernels (today: log_softmax and gather, other roundings)")
    return f"{', '.join(changed)} changed since it ran"


def edit_label(edited, fingerprint=""):
    """How the pages and figures name a run of edited code: 'grpo.py edited', 'grpo.py, rewards.py edited (edit
    1a2b3c)' with its fingerprint."""
    return (f"{', '.join(edited)} edited" + (f" (edit {fingerprint})" if fingerprint else "")) if edited else ""


def edit_fingerprint(code):
    """Six hex digits that tell one edit from another: a hash of the edited files' hashes in a code_record (a
    config.json's "code"); '' for unedited code or a run older than the record."""
    edited = (code or {}).get("edited") or []
    if not edited:
        return ""
    text = "".join(f"{path}={code['files'].get(path)};" for path in edited)
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def code_commit(root=ROOT):
    """The git commit of the code a run ran, '+changes' after it if a top-level .py file, a file of the code's folders
    (FOLDERS) or a shipped checkpoint differs from it; None outside a git checkout."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(glob)*.py",
                                  *FOLDERS, "checkpoints"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if sha.returncode != 0:
        return None
    return sha.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


# ---------------------------------------------------------------- the machine and its rounding

def machine():
    """'x86_64, 2 CPUs (AMD EPYC), AVX512': the kind of machine, as far as floating-point order goes: the CPU,
    and the widest vector instructions it has (what PyTorch's kernels use unless a rounding holds them back)."""
    import torch
    model, flags = None, set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    widest = next((name for flag, name in (("avx512f", "AVX512"), ("avx2", "AVX2"), ("sve", "SVE"), ("asimd", "NEON"))
                   if flag in flags), None)
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (f"{platform.machine()}, {os.cpu_count()} CPUs{f' ({model})' if model else ''}"
            f"{f', {widest}' if widest else ''}{gpu}")


# name -> (train.py's threads, environment, what it changes). plain is how every run goes unless asked;
# each other one sums the same floats in another order, which changes a default run's loss at the 1e-8
# level from its first step (EXPERIMENTS.md, "The lessons on another CPU"). MKL_ENABLE_INSTRUCTIONS is not one:
# it changed no number of a run here, where PyTorch's matrix products do not go through MKL's widths.
ROUNDINGS = {
    "plain": (1, {}, "one thread, the machine's widest vector instructions"),
    "threads2": (2, {}, "two threads: each sum split in two and added"),
    "avx2": (1, {"ATEN_CPU_CAPABILITY": "avx2"}, "PyTorch's kernels held to AVX2 (256-bit vectors)"),
    "scalar": (1, {"ATEN_CPU_CAPABILITY": "default"}, "PyTorch's kernels without vector instructions"),
}


def rounding_env(rounding, environ=None):
    """The environment a run under `rounding` gets: this process's, with ATEN_CPU_CAPABILITY exactly the rounding's
    (none for plain and threads2), whatever the shell set. A shell's ATEN_CPU_CAPABILITY=avx2 would otherwise run
    every plain run at AVX2 and record it so, and the next plain command would find runs of another rounding."""
    own = {k: v for k, v in (os.environ if environ is None else environ).items() if k != "ATEN_CPU_CAPABILITY"}
    return {**own, **ROUNDINGS[rounding][1]}


def rounding_dir(runs_dir, rounding):
    """Where a rounding's runs go: runs_dir for plain, runs_dir-<rounding> for another (runs/exp-avx2)."""
    return runs_dir if rounding == "plain" else f"{runs_dir.rstrip('/')}-{rounding}"


def rounding_name(threads, env=None):
    """The name in ROUNDINGS of the rounding a process runs under (its threads, its ATEN_CPU_CAPABILITY), or
    'threads N, ATEN_CPU_CAPABILITY X' where none is."""
    held = (os.environ if env is None else env).get("ATEN_CPU_CAPABILITY")
    for name, (n, asked, _) in ROUNDINGS.items():
        if n == threads and asked.get("ATEN_CPU_CAPABILITY") == held:
            return name
    return f"threads {threads}" + (f", ATEN_CPU_CAPABILITY {held}" if held else "")


def capability_under(env):
    """The vector width PyTorch's kernels use in a fresh process under env (e.g. 'AVX2'; {}: the machine's own,
    whatever width this process was held to): asked of PyTorch itself, since a width the CPU lacks is silently
    replaced by one it has."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env={**rounding_env("plain"), **env}, capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


def check_roundings(names):
    """Refuse (ValueError, one line) a rounding this code does not know, or one this machine cannot apply:
    a width it lacks, or one that is its own (then it rounds as plain does, under another name)."""
    for name in names:
        if name not in ROUNDINGS:
            raise ValueError(f"unknown rounding {name!r}; choose from {', '.join(ROUNDINGS)}")
        asked = ROUNDINGS[name][1].get("ATEN_CPU_CAPABILITY")
        if asked is None:
            continue
        native, got = capability_under({}), capability_under(ROUNDINGS[name][1])
        if got != asked.upper():
            raise ValueError(f"rounding {name}: this machine cannot hold PyTorch to {asked.upper()} "
                             f"(it runs {got}); nothing was run")
        if got == native:
            raise ValueError(f"rounding {name}: {got} is this machine's own width, so {name} would round as plain "
                             "does; nothing was run")


if __name__ == "__main__":
    record = code_record()
    edited = record["edited"]
    for path, digest in record["files"].items():
        print(f"{digest}  {path}{'  (edited)' if edited and path in edited else ''}")
    print(f"commit {code_commit()}; machine {machine()}")
