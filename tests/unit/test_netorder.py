"""The server's big-endian scalars are defined once (issue 29.4): ``pgfeed.netorder``. A module that needs
``>I`` imports ``U32`` instead of compiling its own ``Struct(">I")``; layouts of several fields
(a frame head, a status update) stay with the code that owns them."""

from __future__ import annotations

import re
from pathlib import Path

from pgfeed import netorder

ROOT = Path(__file__).resolve().parents[2]
# Struct(">I"), struct.pack(">q", ...), struct.unpack_from(">H", ...): one big-endian scalar
_SCALAR = re.compile(r"""(?:Struct|pack|unpack|unpack_from|pack_into)\(\s*["']>[bBhHiIlLqQ]["']""")


def test_scalars_are_network_order_and_sized() -> None:
    assert [(s.format, s.size) for s in (netorder.U8, netorder.I16, netorder.U16, netorder.I32,
                                         netorder.U32, netorder.I64, netorder.U64)] == [
        (">B", 1), (">h", 2), (">H", 2), (">i", 4), (">I", 4), (">q", 8), (">Q", 8)]
    assert netorder.U32.pack(0x01020304) == b"\x01\x02\x03\x04"
    assert netorder.I16.unpack_from(b"\xff\xfe")[0] == -2


def test_no_module_defines_a_scalar_of_its_own() -> None:
    own = ROOT / "service/pgfeed/netorder.py"
    found = [f"{path.relative_to(ROOT)}:{n}"
             for path in sorted((ROOT / "service/pgfeed").rglob("*.py")) if path != own
             for n, line in enumerate(path.read_text().splitlines(), 1) if _SCALAR.search(line)]
    assert found == [], "use pgfeed.netorder's U16/U32/... instead"
    assert _SCALAR.search('_u32 = struct.Struct(">I").unpack_from')  # the check sees one
