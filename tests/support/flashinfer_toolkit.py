"""A toolkit laid out as flashinfer's builder reads it, made of empty files: the headers
its modules include, the libraries its links name, and a stub libcuda."""

from __future__ import annotations

from pathlib import Path


def make_toolkit(root: Path, *, headers: tuple[str, ...] = ("cublasLt.h", "curand_kernel.h"),
                 stub: bool = True) -> Path:
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "bin").mkdir(exist_ok=True)
    (root / "lib64").mkdir(exist_ok=True)
    for header in headers:
        (root / "include" / header).write_text("/* header */\n")
    for name in ("libnvrtc.so.13", "libcublas.so.13", "libcublasLt.so.13"):
        (root / "lib64" / name).write_bytes(b"\x7fELF")
    if stub:
        (root / "lib64" / "stubs").mkdir(exist_ok=True)
        (root / "lib64" / "stubs" / "libcuda.so").write_bytes(b"\x7fELF")
    return root
