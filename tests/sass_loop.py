"""Reading a kernel's main loop out of a SASS listing (cuobjdump -sass), for the tests that count instructions."""
import re
from collections import Counter


def loop_ops(sass: str) -> Counter:
    """Instruction counts by base mnemonic (predicates dropped) between the ends of the longest backward branch: the
    kernel's main loop."""
    code = [(int(a, 16), i) for a, i in re.findall(r"/\*([0-9a-f]{4})\*/\s+([^;]*);", sass)]
    back = [(int(t, 16), a) for a, i in code for t in re.findall(r"BRA\s.*?0x([0-9a-f]+)", i) if int(t, 16) < a]
    lo, hi = max(back, key=lambda r: r[1] - r[0])
    return Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split()[0].split(".")[0] for a, i in code if lo <= a <= hi)
