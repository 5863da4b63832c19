"""Array backends of a finite-width run: numpy (the default), torch, jax and cupy, on CPU or CUDA.

A :class:`Backend` is what the executor needs of an array library: its array-API namespace
``xp`` (through ``array-api-compat``: torch and cupy are wrapped, jax.numpy and numpy are
compliant), a device, the builtin nonlinearities written with ``xp`` (:func:`array_builtins`),
and a random :class:`Stream` per (trial, variable).  The executor's array code uses ``xp`` only,
so ``array_api_strict`` (the standard's minimal namespace, a backend for the tests only) runs it
too: nothing numpy-only slips in.

**numpy** keeps its own paths (numpy Generators, in-place sampling, errstate: the executor's
:class:`~.ops.NumpyOps`; every other backend runs :class:`~.ops.ArrayApiOps`): its numbers are
those of every earlier version, bit for bit.  The other libraries are imported only when
chosen (:func:`get_backend`, cached).

**Random streams.**  Variable ``var`` of trial ``t`` draws from the stream of the key
``SeedSequence(seed, spawn_key=(t, var))`` (blocked matrices: one stream per row block,
``spawn_key=(t, var, 1, block)``), turned into the library's own generator: a
``torch.Generator`` seeded with 63 bits of it (Philox on CUDA), a jax threefry key of its two
32-bit words (counter-based; its gamma draws are numpy's, seeded from the key, then moved to
the device), a cupy Generator; ``array_api_strict`` draws with numpy (the
numbers of the numpy backend) and converts.  So a seed gives the same numbers on the same
backend and device, and other numbers on another backend: the laws are the same, the numbers
are not.  On torch, jax and cupy a float32 run draws float32 numbers (on numpy it rounds the
float64 draws): float32 and float64 runs of one seed agree in law there, not to rounding.

**What each backend lacks.**  ``erf`` and ``gelu`` need special functions the array API does
not have (their records' ``special``): torch, jax and cupy provide them, ``array_api_strict``
does not (a program using them is refused there, naming the builtin).  ``sigmoid`` uses the
library's ``expit`` where it has one, else an array-API form.  Every distribution runs on every backend
(``orthogonal`` through ``xp.linalg.qr``).  numpy runs on the CPU only, cupy on CUDA only.
"""
from __future__ import annotations

import functools
import importlib
import math
from typing import Callable

import numpy as np

from ..builtins import BUILTINS
from ..distributions.family import random_signs

NUMPY, TORCH, JAX, CUPY = "numpy", "torch", "jax", "cupy"
#: the standard's minimal namespace (a backend for the tests)
STRICT = "array_api_strict"
#: the backends of the command line
BACKENDS: tuple[str, ...] = (NUMPY, TORCH, JAX, CUPY)
#: every backend name :func:`get_backend` accepts
ALL_BACKENDS: tuple[str, ...] = BACKENDS + (STRICT,)
DEVICES: tuple[str, ...] = ("cpu", "cuda")
#: the pip extra that installs each library
EXTRAS = {TORCH: "tensorprog[torch]", JAX: "tensorprog[jax]", CUPY: "tensorprog[cupy]",
          STRICT: "array-api-strict"}


class BackendError(ValueError):
    """A backend that cannot run here: unknown, not installed, or without the device asked for."""


# ================================================================================ random streams
def stream_seed(seed: int, *key: int) -> np.random.SeedSequence:
    """The seed sequence of one stream: ``SeedSequence(seed, spawn_key=key)``."""
    return np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key))


class Stream:
    """The random numbers of one (trial, variable) on a backend, in the run's dtype: the
    interface the samplers of :mod:`tensorprog.distributions` draw from (``xp``, ``dtype``)."""

    def __init__(self, backend: Backend, seq: np.random.SeedSequence, dtype: np.dtype) -> None:
        self.backend, self.xp = backend, backend.xp
        self.np_dtype = np.dtype(dtype)
        self.dtype = backend.dtype(dtype)

    def asarray(self, a) -> object:
        """A host array (or number) as a backend array of this stream's dtype, on its device."""
        return self.backend.asarray(a, self.np_dtype)

    def normal(self, shape: tuple[int, ...]):
        """iid N(0, 1)."""
        raise NotImplementedError

    def uniform(self, shape: tuple[int, ...]):
        """iid uniform on [0, 1)."""
        raise NotImplementedError

    def exponential(self, shape: tuple[int, ...]):
        """iid standard exponential."""
        raise NotImplementedError

    def gamma(self, alpha: float, shape: tuple[int, ...]):
        """iid Gamma(alpha, 1)."""
        raise NotImplementedError

    def signs(self, shape: tuple[int, ...]):
        """iid fair signs ±1 (in the dtype)."""
        raise NotImplementedError


class HostStream(Stream):
    """numpy's Generator of the same key as the numpy backend, converted: ``array_api_strict``
    draws the numbers of a numpy run (float64 draws, rounded for float32)."""

    def __init__(self, backend: Backend, seq: np.random.SeedSequence, dtype: np.dtype) -> None:
        super().__init__(backend, seq, dtype)
        self.rng = np.random.default_rng(seq)

    def normal(self, shape):
        return self.asarray(self.rng.standard_normal(shape))

    def uniform(self, shape):
        return self.asarray(self.rng.random(shape))

    def exponential(self, shape):
        return self.asarray(self.rng.standard_exponential(shape))

    def gamma(self, alpha, shape):
        return self.asarray(self.rng.standard_gamma(alpha, size=shape))

    def signs(self, shape):
        return self.asarray(random_signs(self.rng, tuple(shape)))


class TorchStream(Stream):
    """A ``torch.Generator`` on the device, seeded with 63 bits of the key."""

    def __init__(self, backend: Backend, seq: np.random.SeedSequence, dtype: np.dtype) -> None:
        super().__init__(backend, seq, dtype)
        torch = backend.module
        self.torch = torch
        self.gen = torch.Generator(device=backend.dev)
        self.gen.manual_seed(int(seq.generate_state(1, np.uint64)[0] >> np.uint64(1)))
        self.kw = dict(dtype=self.dtype, device=backend.dev)

    def normal(self, shape):
        return self.torch.randn(tuple(shape), generator=self.gen, **self.kw)

    def uniform(self, shape):
        return self.torch.rand(tuple(shape), generator=self.gen, **self.kw)

    def exponential(self, shape):
        return self.torch.empty(tuple(shape), **self.kw).exponential_(generator=self.gen)

    def gamma(self, alpha, shape):
        """torch's gamma sampler takes no generator: the global one, seeded from this stream
        inside ``fork_rng`` (which restores it)."""
        torch = self.torch
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=self.gen, device=self.backend.dev))
        cuda = [self.backend.dev] if self.backend.device == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            concentration = torch.full(tuple(shape), float(alpha), **self.kw)
            return torch.distributions.Gamma(concentration, 1.0).sample()

    def signs(self, shape):
        bits = self.torch.randint(0, 2, tuple(shape), generator=self.gen, device=self.backend.dev,
                                  dtype=self.torch.int8)
        out = bits.to(self.dtype)
        out *= 2
        out -= 1
        return out


class JaxStream(Stream):
    """A jax threefry key (counter-based) of the two 32-bit words of the key, split per draw."""

    def __init__(self, backend: Backend, seq: np.random.SeedSequence, dtype: np.dtype) -> None:
        super().__init__(backend, seq, dtype)
        self.random = backend.module.random
        with backend.module.default_device(backend.dev):
            self.key = self.random.wrap_key_data(seq.generate_state(2, np.uint32))

    def _next(self):
        self.key, sub = self.random.split(self.key)
        return sub

    def _on(self, draw: Callable, *args):
        with self.backend.module.default_device(self.backend.dev):
            return draw(self._next(), *args)

    def normal(self, shape):
        return self._on(self.random.normal, tuple(shape), self.dtype)

    def uniform(self, shape):
        return self._on(self.random.uniform, tuple(shape), self.dtype)

    def exponential(self, shape):
        return self._on(self.random.exponential, tuple(shape), self.dtype)

    def gamma(self, alpha, shape):
        """numpy's gamma sampler, seeded from this stream (jax's, a rejection loop, is ~10x slower
        on a CPU), moved to the device."""
        words = self._on(self.random.bits, (4,), self.backend.module.numpy.uint32)
        rng = np.random.default_rng(np.asarray(words))
        return self.backend.asarray(rng.standard_gamma(float(alpha), size=tuple(shape)), self.np_dtype)

    def signs(self, shape):
        return self._on(self.random.rademacher, tuple(shape), self.dtype)


class CupyStream(Stream):
    """``cupy.random.Generator`` (XORWOW) of 63 bits of the key."""

    def __init__(self, backend: Backend, seq: np.random.SeedSequence, dtype: np.dtype) -> None:
        super().__init__(backend, seq, dtype)
        self.gen = backend.module.random.default_rng(int(seq.generate_state(1, np.uint64)[0] >> np.uint64(1)))
        self.dt = self.np_dtype

    def normal(self, shape):
        return self.gen.standard_normal(tuple(shape), dtype=self.dt)

    def uniform(self, shape):
        return self.gen.random(tuple(shape), dtype=self.dt)

    def exponential(self, shape):
        return self.gen.standard_exponential(tuple(shape), dtype=self.dt)

    def gamma(self, alpha, shape):
        return self.gen.standard_gamma(float(alpha), tuple(shape), dtype=self.dt)

    def signs(self, shape):
        out = self.gen.integers(0, 2, tuple(shape)).astype(self.dt)
        out *= 2
        out -= 1
        return out


# ================================================================================ builtins
def array_builtins(xp, special: dict[str, Callable]) -> dict[str, Callable]:
    """The builtin nonlinearities written with the array-API namespace ``xp``, from each builtin
    record's ``array`` facet (and the backend's ``special`` functions erf, ndtr, expit where it
    has them: a builtin needing one the backend lacks is left out), on arrays; a second argument
    may be a Python number."""
    table: dict[str, Callable] = {}
    for name, b in BUILTINS.items():
        if b.special is None or b.special in special:
            table[name] = getattr(xp, b.array) if isinstance(b.array, str) else b.array(xp, special)
    return table


# ================================================================================ backends
class Backend:
    """An array library on a device: ``xp`` (array API), ``dev`` (the library's device object),
    ``module`` (the library itself), ``special`` functions and :attr:`builtins`."""

    stream_class: type[Stream] = HostStream

    def __init__(self, name: str, device: str, module, xp, dev, special: dict[str, Callable]) -> None:
        self.name, self.device, self.module, self.xp, self.dev = name, device, module, xp, dev
        self.special = special
        self.builtins = array_builtins(xp, special)

    def __repr__(self) -> str:
        return f"<backend {self.name} on {self.device}>"

    @property
    def is_numpy(self) -> bool:
        return self.name == NUMPY

    def dtype(self, dtype):
        """The library's float dtype of the numpy dtype ``dtype``."""
        return getattr(self.xp, np.dtype(dtype).name)

    def asarray(self, a, dtype) -> object:
        """A host array (or number) as an array of ``dtype`` on the device."""
        return self.xp.asarray(np.asarray(a, dtype=np.dtype(dtype)), device=self.dev)

    def to_numpy(self, a) -> np.ndarray:
        """A backend array (or a number) as a numpy array on the host."""
        if isinstance(a, (int, float, np.ndarray, np.generic)):
            return np.asarray(a)
        return np.asarray(self.host(a))

    def host(self, a):
        """What numpy can read of a device array (a host copy)."""
        return a

    def stream(self, seq: np.random.SeedSequence, dtype) -> Stream:
        """The random stream of the seed sequence ``seq`` in ``dtype``."""
        return self.stream_class(self, seq, dtype)

    def lacks(self, builtin: str) -> bool:
        """Whether the builtin cannot run here (it needs a special function the backend lacks;
        numpy runs :data:`~tensorprog.builtins.BUILTINS` itself)."""
        need = BUILTINS[builtin].special
        return not self.is_numpy and need is not None and need not in self.special

    def free_memory(self) -> int | None:
        """Free bytes of the device (None: host memory, planned as for numpy)."""
        return None

    def transposed_product(self, w) -> Callable:
        """x -> Wᵀx for a dense matrix ``w``: ``w.T`` is a view here (numpy, torch, cupy), so the
        product reads W in place."""
        wt = w.T
        return lambda x: wt @ x

    def synchronize(self) -> None:
        """Wait for the device's queued work (for timings)."""


class StrictBackend(Backend):
    """array_api_strict: host arrays, numpy's random numbers; asarray goes through a list-free
    numpy conversion (``np.asarray`` of a strict array is its buffer)."""

    def host(self, a):
        return np.from_dlpack(a)


class TorchBackend(Backend):
    stream_class = TorchStream

    def asarray(self, a, dtype) -> object:
        return self.module.as_tensor(np.asarray(a, dtype=np.dtype(dtype)), device=self.dev)

    def host(self, a):
        return a.detach().cpu().numpy()

    def free_memory(self) -> int | None:
        """The device's free bytes plus those torch's caching allocator holds unused (freed tensors'
        blocks, which it hands out again before asking the device): after a trial the device's own
        count leaves them out, and a second trial of the same size was refused (H100, 10^9 float32
        in conditional mode, bench/README.md)."""
        if self.device != "cuda":
            return None
        cuda = self.module.cuda
        cached = int(cuda.memory_reserved(self.dev)) - int(cuda.memory_allocated(self.dev))
        return int(cuda.mem_get_info(self.dev)[0]) + max(cached, 0)

    def synchronize(self) -> None:
        if self.device == "cuda":
            self.module.cuda.synchronize(self.dev)


class JaxBackend(Backend):
    stream_class = JaxStream

    def asarray(self, a, dtype) -> object:
        return self.module.device_put(np.asarray(a, dtype=np.dtype(dtype)), self.dev)

    def free_memory(self) -> int | None:
        if self.device != "cuda":
            return None
        stats = self.dev.memory_stats() or {}
        if "bytes_limit" not in stats:
            return None
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))

    def transposed_product(self, w) -> Callable:
        """x -> Wᵀx as (xᵀW)ᵀ: jax's ``w.T`` is a new array, a second n × n on the device (and XLA's
        autotuning of that transpose asked for a third: width 65536 in float32 ran out of an H100's
        memory, bench/README.md); the product of xᵀ by W contracts W's rows where they lie."""
        return lambda x: (x.T @ w).T

    def synchronize(self) -> None:
        self.module.block_until_ready(self.module.numpy.zeros(1, device=self.dev))


class CupyBackend(Backend):
    stream_class = CupyStream

    def host(self, a):
        return self.module.asnumpy(a)

    def free_memory(self) -> int | None:
        """The device's free bytes plus those cupy's memory pool holds unused (freed arrays' blocks,
        reused before the device is asked: :meth:`TorchBackend.free_memory`)."""
        pool = self.module.get_default_memory_pool()
        return int(self.module.cuda.runtime.memGetInfo()[0]) + int(pool.free_bytes())

    def synchronize(self) -> None:
        self.module.cuda.get_current_stream().synchronize()


def _require(module: str, backend: str):
    """Import ``module`` for ``backend``, or a BackendError saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise BackendError(f"the {backend} backend needs {module.split('.')[0]}, which is not installed "
                           f"({err}); install it with: pip install '{EXTRAS.get(backend, module)}'") from None


def _numpy(device: str) -> Backend:
    if device != "cpu":
        raise BackendError("numpy runs on the CPU only: for --device cuda use --backend torch, jax or cupy")
    return Backend(NUMPY, device, np, np, None, {})


def _strict(device: str) -> Backend:
    if device != "cpu":
        raise BackendError("array_api_strict runs on the CPU only")
    xp = _require("array_api_strict", STRICT)
    return StrictBackend(STRICT, device, xp, xp, None, {})


def _torch(device: str) -> Backend:
    torch = _require("torch", TORCH)
    compat = _require("array_api_compat.torch", TORCH)
    if device == "cuda" and not torch.cuda.is_available():
        raise BackendError("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is "
                           "False; a CPU-only torch build, or no GPU): use --device cpu")
    special = {"erf": torch.special.erf, "ndtr": torch.special.ndtr, "expit": torch.special.expit}
    return TorchBackend(TORCH, device, torch, compat, torch.device(device), special)


def _jax(device: str) -> Backend:
    jax = _require("jax", JAX)
    jax.config.update("jax_enable_x64", True)         # float64 runs (float32 arrays stay float32)
    platform = "cpu" if device == "cpu" else "gpu"
    try:
        dev = jax.devices(platform)[0]
    except RuntimeError:
        raise BackendError("--device cuda: jax sees no GPU here (a CPU-only jax: pip install "
                           "'jax[cuda12]'; or no GPU): use --device cpu") from None
    special_mod = importlib.import_module("jax.scipy.special")
    special = {"erf": special_mod.erf, "ndtr": special_mod.ndtr, "expit": special_mod.expit}
    return JaxBackend(JAX, device, jax, jax.numpy, dev, special)


def _cupy(device: str) -> Backend:
    if device != "cuda":
        raise BackendError("cupy runs on CUDA only: use --device cuda (or another backend on the CPU)")
    cupy = _require("cupy", CUPY)
    compat = _require("array_api_compat.cupy", CUPY)
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        raise BackendError("--device cuda: cupy finds no CUDA device here") from None
    special_mod = importlib.import_module("cupyx.scipy.special")
    special = {"erf": special_mod.erf, "ndtr": special_mod.ndtr, "expit": special_mod.expit}
    return CupyBackend(CUPY, device, cupy, compat, None, special)


LOADERS: dict[str, Callable[[str], Backend]] = {NUMPY: _numpy, TORCH: _torch, JAX: _jax, CUPY: _cupy,
                                                STRICT: _strict}


@functools.lru_cache(maxsize=None)
def get_backend(name: str = NUMPY, device: str = "cpu") -> Backend:
    """The backend ``name`` on ``device`` ('cpu' or 'cuda'), its library imported now; a
    BackendError names what is missing (the library, its extra, or the device)."""
    if name not in LOADERS:
        raise BackendError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    if device not in DEVICES:
        raise BackendError(f"unknown device {device!r} (known: {', '.join(DEVICES)})")
    return LOADERS[name](device)


def is_array(value) -> bool:
    """A backend array, not a Python number (the executor's scalars are Python floats)."""
    return not isinstance(value, (int, float))


def all_finite(backend: Backend, value) -> bool:
    """Every entry of ``value`` (an array or a number) is finite."""
    if not is_array(value):
        return math.isfinite(value)
    xp = backend.xp
    return bool(xp.all(xp.isfinite(value)))
