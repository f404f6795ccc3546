"""The registry's index, read from the source: what every module registers, without importing it.

Registrations are calls the parser can see: ``@technique(...)``, ``@prepare_step(...)``,
``@register(kind, name, ...)`` over a def or class, ``register(kind, name, ...)(obj)`` and
``add(kind, name, obj, ...)``, at module level or in a module-level ``for`` over a literal table
(``for _name, _cls in {"fp32": Fp32, ...}.items(): add("matrix_codec", _name, _cls)``). An AST scan
of ``components/`` records each one's kind, name, the module whose import registers it, its file
and line, its summary (the literal, else the first line of the object's docstring, as
:func:`components.core.registry.add` takes it), its extra keywords (a technique's family) and its
params dataclass's dotted path. ``dtlab list`` and completion read this index; a lookup imports only
the module it names.

The scan is kept per file (mtime and size) in a JSON manifest in the user's cache directory, so a
warm start costs a few hundred ``stat`` calls; an edited, added or removed file is scanned again.

Two fallbacks keep the index honest where the source is not literal:

- a registration whose kind, name, summary or keywords the scan cannot evaluate (a computed name, a
  registration under an ``if``) marks its module *dynamic*: the registry imports that one module to
  learn what it registers;
- a file that does not parse is *broken*: it is listed with a one-line error, and only the lookups
  that need it fail.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

REGISTRY_MODULE = "components.core.registry"
# registry function -> its parameters in order; a name after "*" is keyword-only; "**" takes the rest
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "technique": ("name", "*", "family", "summary", "params", "validate", "inputs", "devices"),
    "prepare_step": ("name", "*", "summary", "params", "inputs", "seeded", "devices", "per_device"),
    "register": ("kind", "name", "*", "summary", "**"),
    "add": ("kind", "name", "obj", "summary", "**"),
}
_FORMAT = 1  # bump when the manifest's JSON shape changes (the scanner's own source is keyed as well)


@dataclass(frozen=True)
class Listing:
    """One registration as the source states it: what ``dtlab list`` shows, and where to import it."""

    kind: str
    name: str
    module: str                  # the module whose import registers it
    file: str                    # that module's file, relative to the folder holding the package
    line: int = 0
    summary: str = ""
    meta: dict = field(default_factory=dict)   # a technique's family; register(...)'s extra keywords
    params: str = ""             # dotted path of the params dataclass, where the source names one

    @property
    def family(self) -> str:
        return self.meta.get("family", "")

    @property
    def obj(self) -> Any:
        """The registered object itself: imports this entry's module (and only it)."""
        from components.core.registry import lookup

        return lookup(self.kind, self.name)


@dataclass(frozen=True)
class Broken:
    """A module that cannot be read (at scan) or imported (at lookup), with its error in one line."""

    module: str
    file: str
    error: str

    def __str__(self) -> str:
        return f"{self.module} ({self.file}): {self.error}"


@dataclass
class Manifest:
    """The index of one package tree: every listing, the dynamic and broken modules, all modules."""

    listings: list[Listing]
    dynamic: list[str]           # modules to import to learn what they register
    broken: list[Broken]         # files that do not parse
    modules: list[str]           # every module of the tree, in path order (what discover imports)
    files: dict[str, str]        # module -> file

    def of(self, kind: str) -> dict[str, Listing]:
        """The listings of ``kind`` by name (the first one where a name is listed twice)."""
        out: dict[str, Listing] = {}
        for e in self.listings:
            if e.kind == kind:
                out.setdefault(e.name, e)
        return out

    def find(self, kind: str, name: str) -> list[Listing]:
        return [e for e in self.listings if e.kind == kind and e.name == name]


# ----------------------------------------------------------------------------------------- the scan
class _NotStatic(Exception):
    """A value the scan cannot evaluate from the source alone."""


def one_line_error(e: BaseException, where: str | None, line: int | None, own_file: str) -> str:
    """``Type: message (line N)``, naming the file too when it is not ``own_file`` (an import of it)."""
    msg = e.msg if isinstance(e, SyntaxError) else (str(e).strip().splitlines() or [""])[0]
    at = ", ".join(x for x in (where if where and where != own_file else "", f"line {line}" if line else "") if x)
    return f"{type(e).__name__}: {msg}" + (f" ({at})" if at else "")


class _ModuleScan:
    """The module-level names of one parsed module and the registrations among its statements."""

    def __init__(self, tree: ast.Module, module: str, file: str, is_pkg: bool):
        self.module, self.file = module, file
        self.pkg = module if is_pkg else module.rpartition(".")[0]
        self.imports: dict[str, str] = {}      # local name -> dotted path
        self.assigns: dict[str, ast.expr] = {}
        self.defs: dict[str, ast.AST] = {}     # module-level def / class by name
        self.listings: list[Listing] = []
        self.dynamic = False
        self._bind(tree.body)
        for stmt in tree.body:
            self._statement(stmt, {})

    # -------------------------------------------------------------------------------- names
    def _bind(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import):
                for a in stmt.names:
                    if a.asname:
                        self.imports[a.asname] = a.name
                    else:
                        head = a.name.split(".")[0]
                        self.imports[head] = head
            elif isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    parts = self.pkg.split(".")
                    base = ".".join(parts[: len(parts) - stmt.level + 1] + ([stmt.module] if stmt.module else []))
                for a in stmt.names:
                    self.imports[a.asname or a.name] = f"{base}.{a.name}"
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[stmt.name] = stmt
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                self.assigns[stmt.targets[0].id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                self.assigns[stmt.target.id] = stmt.value
            elif isinstance(stmt, (ast.If, ast.Try)):  # names bound in either branch: the scan stays conservative
                for sub in (getattr(stmt, "body", []), getattr(stmt, "orelse", []), getattr(stmt, "finalbody", [])):
                    self._bind(sub)

    def _dotted(self, node: ast.expr) -> str | None:
        """``a.b.c`` with its first name resolved through the module's imports (None if it is not one)."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.imports.get(node.id)
        if head is None:
            return None
        return ".".join([head, *reversed(attrs)])

    def _registry_fn(self, node: ast.expr) -> str | None:
        """Which registry function ``node`` calls (technique, prepare_step, register, add), if any."""
        dotted = self._dotted(node)
        if dotted is None:
            return None
        base, _, fn = dotted.rpartition(".")
        return fn if base == REGISTRY_MODULE and fn in _SIGNATURES else None

    # ---------------------------------------------------------------------------- evaluation
    def _eval(self, node: ast.AST, env: dict[str, ast.AST], depth: int = 0) -> Any:
        if depth > 20:
            raise _NotStatic
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return self._eval(env[node.id], env, depth + 1)
            if node.id in self.assigns:
                return self._eval(self.assigns[node.id], {}, depth + 1)
            raise _NotStatic
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self._eval(e, env, depth + 1) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise _NotStatic
            return {self._eval(k, env, depth + 1): self._eval(v, env, depth + 1)
                    for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Subscript):
            table = self._table(node.value, env, depth + 1)
            key = self._eval(node.slice, env, depth + 1)
            if key not in table:
                raise _NotStatic
            return self._eval(table[key], env, depth + 1)
        if isinstance(node, ast.Attribute):       # SERVICE.summary where SERVICE = Service(..., summary="...")
            call = self._value_node(node.value, env)
            if isinstance(call, ast.Call):
                for kw in call.keywords:
                    if kw.arg == node.attr:
                        return self._eval(kw.value, env, depth + 1)
            raise _NotStatic
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._eval(node.left, env, depth + 1) + self._eval(node.right, env, depth + 1)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.FormattedValue):
                    if v.conversion != -1 or v.format_spec is not None:
                        raise _NotStatic
                    parts.append(str(self._eval(v.value, env, depth + 1)))
                else:
                    parts.append(str(self._eval(v, env, depth + 1)))
            return "".join(parts)
        raise _NotStatic

    def _value_node(self, node: ast.AST, env: dict[str, ast.AST]) -> ast.AST | None:
        """The expression a name stands for (a loop binding or a module-level assignment)."""
        for _ in range(20):
            if not isinstance(node, ast.Name) or (node.id not in env and node.id not in self.assigns):
                return node      # an expression, or a name bound otherwise (a def, a class, an import)
            node = env[node.id] if node.id in env else self.assigns[node.id]
        return None

    def _table(self, node: ast.AST, env: dict[str, ast.AST], depth: int) -> dict:
        """A dict literal (by name or inline) as {evaluated key: value node}."""
        node = self._value_node(node, env)
        if not isinstance(node, ast.Dict) or any(k is None for k in node.keys):
            raise _NotStatic
        return {self._eval(k, env, depth + 1): v for k, v in zip(node.keys, node.values)}

    def _loop_bindings(self, loop: ast.For) -> list[dict[str, ast.AST]]:
        """One environment per iteration of a module-level ``for`` over a literal table."""
        it = loop.iter
        method = None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and not it.args and not it.keywords \
                and it.func.attr in ("items", "keys", "values"):
            method, it = it.func.attr, it.func.value
        node = self._value_node(it, {})
        if isinstance(node, ast.Dict) and method in (None, "keys", "items", "values"):
            if any(k is None for k in node.keys):
                raise _NotStatic
            pairs = list(zip(node.keys, node.values))
            items: list[ast.AST] = ([ast.Tuple(elts=[k, v]) for k, v in pairs] if method == "items"
                                    else [v for _, v in pairs] if method == "values" else [k for k, _ in pairs])
        elif isinstance(node, (ast.Tuple, ast.List)) and method is None:
            items = list(node.elts)
        else:
            raise _NotStatic
        return [self._unpack(loop.target, item) for item in items]

    def _unpack(self, target: ast.AST, value: ast.AST) -> dict[str, ast.AST]:
        if isinstance(target, ast.Name):
            return {target.id: value}
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            env: dict[str, ast.AST] = {}
            for t, v in zip(target.elts, value.elts):
                env.update(self._unpack(t, v))
            return env
        raise _NotStatic

    # ------------------------------------------------------------------------- registrations
    def _statement(self, stmt: ast.stmt, env: dict[str, ast.AST]) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for deco in stmt.decorator_list:
                if isinstance(deco, ast.Call) and (fn := self._registry_fn(deco.func)):
                    self._register(fn, deco, stmt, env)
            if isinstance(stmt, ast.ClassDef) and any(self._calls_registry(s) for s in stmt.body):
                self.dynamic = True        # registered from a class body: import to know
            return
        if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            value = stmt.value
            if isinstance(value, ast.Call):
                if isinstance(value.func, ast.Call) and (fn := self._registry_fn(value.func.func)) \
                        and fn != "add" and len(value.args) == 1 and not value.keywords:
                    return self._register(fn, value.func, value.args[0], env)   # register(kind, name)(obj)
                if (fn := self._registry_fn(value.func)) == "add":
                    return self._register(fn, value, None, env)
            if self._calls_registry(value):
                self.dynamic = True
            return
        if isinstance(stmt, ast.For) and not stmt.orelse:
            if not self._calls_registry(stmt):
                return
            try:
                bindings = self._loop_bindings(stmt)
            except _NotStatic:
                self.dynamic = True
                return
            for b in bindings:
                for sub in stmt.body:
                    self._statement(sub, {**env, **b})
            return
        # registrations under if / try / while / with at module level run or not at import: import to know
        if not isinstance(stmt, (ast.Import, ast.ImportFrom)) and self._calls_registry(stmt):
            self.dynamic = True

    def _calls_registry(self, node: ast.AST) -> bool:
        """Whether ``node`` calls a registry function outside any def or class body (run at import)."""
        todo = [node]
        while todo:
            n = todo.pop()
            if isinstance(n, ast.Call) and self._registry_fn(n.func):
                return True
            if n is not node and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue                   # a body that runs when called, not at import (a class body runs)
            todo.extend(ast.iter_child_nodes(n))
        return False

    def _bind_args(self, fn: str, call: ast.Call) -> dict[str, ast.AST]:
        sig = _SIGNATURES[fn]
        positional = [p for p in sig[: sig.index("*")] if p != "*"] if "*" in sig else [p for p in sig if p != "**"]
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords) \
                or len(call.args) > len(positional):
            raise _NotStatic
        bound: dict[str, ast.AST] = dict(zip(positional, call.args))
        for kw in call.keywords:
            if kw.arg in bound or (kw.arg not in sig and "**" not in sig):
                raise _NotStatic
            bound[kw.arg] = kw.value
        return bound

    def _register(self, fn: str, call: ast.Call, obj: ast.AST | None, env: dict[str, ast.AST]) -> None:
        try:
            self.listings.append(self._listing(fn, call, obj, env))
        except _NotStatic:
            self.dynamic = True

    def _listing(self, fn: str, call: ast.Call, obj: ast.AST | None, env: dict[str, ast.AST]) -> Listing:
        args = self._bind_args(fn, call)
        kind = {"technique": "technique", "prepare_step": "prepare_step"}.get(fn) or self._eval(args["kind"], env)
        name = self._eval(args["name"], env)
        if not isinstance(kind, str) or not isinstance(name, str):
            raise _NotStatic
        if fn == "add":
            obj = args.get("obj")
            if obj is None:
                raise _NotStatic
        if fn in ("register", "add"):      # their extra keywords are the entry's meta
            meta = {k: self._eval(v, env) for k, v in args.items() if k not in ("kind", "name", "obj", "summary")}
        else:                              # technique() keeps its family as meta; prepare_step() none
            meta = {"family": self._eval(args["family"], env)} if fn == "technique" else {}
        summary = self._eval(args["summary"], env) if "summary" in args else ""
        if not isinstance(summary, str):
            raise _NotStatic
        if not summary:
            summary = self._docstring_line(obj, env)
        return Listing(kind=kind, name=name, module=self.module, file=self.file, line=call.lineno,
                       summary=summary.strip(), meta=meta, params=self._params_path(args.get("params"), env))

    def _docstring_line(self, obj: ast.AST | None, env: dict[str, ast.AST]) -> str:
        """The first line of the registered object's docstring (what add() falls back to)."""
        node = self._value_node(obj, env) if obj is not None else None
        if isinstance(node, ast.Name) and node.id in self.defs:
            node = self.defs[node.id]
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            raise _NotStatic
        doc = ast.get_docstring(node, clean=True)
        if isinstance(node, ast.ClassDef):
            if doc is None and node.bases:
                raise _NotStatic  # inspect.getdoc would take a base class's docstring: import to read it
            if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "fn" for s in node.body):
                raise _NotStatic  # add() reads the docstring of obj.fn
        doc = (doc or "").strip()
        return doc.splitlines()[0] if doc else ""

    def _params_path(self, node: ast.AST | None, env: dict[str, ast.AST]) -> str:
        if node is None or isinstance(node, ast.Constant):
            return ""
        if isinstance(node, ast.Name) and node.id in env:
            node = env[node.id]
        if isinstance(node, ast.Name) and isinstance(self.defs.get(node.id), ast.ClassDef):
            return f"{self.module}.{node.id}"
        return self._dotted(node) or ""


def scan_source(source: bytes, module: str, file: str, is_pkg: bool) -> tuple[list[Listing], bool]:
    """The listings of one module's source and whether it is dynamic; SyntaxError if it does not parse."""
    tree = ast.parse(source, filename=file)
    s = _ModuleScan(tree, module, file, is_pkg)
    return s.listings, s.dynamic


# ------------------------------------------------------------------------------------ the index
def default_cache_file(root: Path) -> Path | None:
    """``$DTLAB_REGISTRY_MANIFEST``, else one manifest per checkout under the user's cache directory."""
    explicit = os.environ.get("DTLAB_REGISTRY_MANIFEST")
    if explicit:
        return Path(explicit)
    from components.core.cache import user_cache_dir

    tag = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    return user_cache_dir() / f"registry-{tag}.json"


class Index:
    """The manifest of the package at ``root`` (a folder holding ``__init__.py``), kept current.

    :meth:`manifest` walks the tree as ``pkgutil.walk_packages`` would (sub-folders with an
    ``__init__.py``; private modules ``_x.py`` skipped), reuses the cached scan of every file whose
    mtime and size are unchanged, scans the others, and rewrites the cache file when anything moved.
    """

    def __init__(self, root: Path, package: str | None = None, cache_file: Path | None = None):
        self.root = Path(root)
        self.package = package or self.root.name
        self.cache_file = cache_file
        self._files: dict[str, dict] | None = None
        self._manifest: Manifest | None = None

    def families(self) -> tuple[str, ...]:
        """The package's sub-packages: a family is a folder with an ``__init__.py``."""
        return tuple(sorted(p.name for p in self.root.iterdir()
                            if p.is_dir() and not p.name.startswith(("_", ".")) and (p / "__init__.py").is_file()))

    def _walk(self, pkg: str | None = None, folder: Path | None = None) -> Iterator[tuple[str, Path, bool]]:
        """(module, path, is_package) of every module of the tree, in ``pkgutil.walk_packages`` order."""
        pkg, folder = pkg or self.package, folder or self.root
        if pkg == self.package:
            yield pkg, folder / "__init__.py", True
        for fn in sorted(os.listdir(folder)):
            path = folder / fn
            if fn.endswith(".py") and fn[:-3].isidentifier() and not fn.startswith("_") and path.is_file():
                yield f"{pkg}.{fn[:-3]}", path, False
            elif fn.isidentifier() and fn != "__pycache__" and (path / "__init__.py").is_file():
                yield f"{pkg}.{fn}", path / "__init__.py", True
                yield from self._walk(f"{pkg}.{fn}", path)

    def rel(self, path: str | Path) -> str:
        """``path`` as the manifest names files: relative to the folder holding the package."""
        for p, base in ((Path(path), self.root.parent), (Path(path).resolve(), self.root.parent.resolve())):
            try:
                return str(p.relative_to(base))
            except ValueError:
                continue
        return str(path)

    def _scanner_key(self) -> str:
        st = os.stat(__file__)
        return f"{_FORMAT}:{st.st_mtime_ns}:{st.st_size}"

    def _load_cache(self) -> dict[str, dict]:
        if self._files is not None:
            return self._files
        self._files = {}
        if self.cache_file is not None:
            try:
                data = json.loads(self.cache_file.read_text())
                if data.get("scanner") == self._scanner_key() and data.get("root") == str(self.root.resolve()):
                    self._files = data["files"]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return self._files

    def _save_cache(self, files: dict[str, dict]) -> None:
        if self.cache_file is None:
            return
        blob = json.dumps({"scanner": self._scanner_key(), "root": str(self.root.resolve()), "files": files})
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.cache_file.parent, prefix=".registry-", suffix=".json")
        except OSError:
            return                               # read-only home: the scan is cheap enough in memory
        try:
            with os.fdopen(fd, "w") as f:
                f.write(blob)
            os.replace(tmp, self.cache_file)     # atomic: concurrent commands never read half a file
        except OSError:
            Path(tmp).unlink(missing_ok=True)

    def manifest(self, refresh: bool = False) -> Manifest:
        """The manifest, read once per process (``refresh``: look at the tree again): unchanged
        files from the cache file, the others scanned now."""
        if self._manifest is not None and not refresh:
            return self._manifest
        cached = self._load_cache()
        files: dict[str, dict] = {}
        changed = False
        for module, path, is_pkg in self._walk():
            try:
                st = os.stat(path)
            except OSError:
                continue
            stamp = [st.st_mtime_ns, st.st_size]
            rel = self.rel(path)
            old = cached.get(module)
            if old is not None and old.get("stamp") == stamp and old.get("file") == rel:
                files[module] = old
                continue
            changed = True
            rec: dict[str, Any] = {"stamp": stamp, "file": rel, "listings": [], "dynamic": False, "error": None}
            try:
                listings, rec["dynamic"] = scan_source(path.read_bytes(), module, rel, is_pkg)
                rec["listings"] = [asdict(e) for e in listings]
            except SyntaxError as e:
                rec["error"] = one_line_error(e, rel, e.lineno, rel)
            except (OSError, ValueError) as e:     # unreadable, or NUL bytes in the source
                rec["error"] = f"{type(e).__name__}: {e}"
            files[module] = rec
        if changed or set(files) != set(cached):
            self._files = files
            self._save_cache(files)
        self._manifest = Manifest(
            listings=[Listing(**e) for rec in files.values() for e in rec["listings"]],
            dynamic=[m for m, rec in files.items() if rec["dynamic"]],
            broken=[Broken(m, rec["file"], rec["error"]) for m, rec in files.items() if rec["error"]],
            modules=list(files), files={m: rec["file"] for m, rec in files.items()})
        return self._manifest
