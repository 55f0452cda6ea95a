"""Implementation colours and markers: fixed per name, colour-blind-safe, no two alike."""

from __future__ import annotations

import itertools
import math

import pytest

pytest.importorskip("plotly", reason="figures need plotly")

from nmsbench import plots  # noqa: E402

# The smallest CIEDE2000 difference allowed between two implementations' colours: about
# where two thin lines stop being told apart at a glance (2.3 is "just noticeable").
MIN_DELTA_E = 20.0
# A later name may share a marker shape with no built-in one, so its colour may sit closer.
MIN_DELTA_E_EXTRA = 15.0


def _lab(hex_color: str) -> tuple[float, float, float]:
    """sRGB hex to CIELAB (D65)."""
    rgb = [int(hex_color.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    x = (0.4124564 * lin[0] + 0.3575761 * lin[1] + 0.1804375 * lin[2]) / 0.95047
    y = 0.2126729 * lin[0] + 0.7151522 * lin[1] + 0.0721750 * lin[2]
    z = (0.0193339 * lin[0] + 0.1191920 * lin[1] + 0.9503041 * lin[2]) / 1.08883
    f = [t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def delta_e_2000(a: str, b: str) -> float:
    """CIEDE2000 colour difference (Sharma, Wu and Dalal 2005)."""
    (l1, a1, b1), (l2, a2, b2) = _lab(a), _lab(b)
    c_bar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_bar ** 7 / (c_bar ** 7 + 25 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    dh = 0.0 if c1p * c2p == 0 else (h2p - h1p if abs(h2p - h1p) <= 180 else h2p - h1p - 360 * math.copysign(1, h2p - h1p))
    dH = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_bar, cp_bar = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_bar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_bar = (h1p + h2p) / 2
    else:
        h_bar = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_bar - 30)) + 0.24 * math.cos(math.radians(2 * h_bar))
         + 0.32 * math.cos(math.radians(3 * h_bar + 6)) - 0.20 * math.cos(math.radians(4 * h_bar - 63)))
    sl = 1 + 0.015 * (l_bar - 50) ** 2 / math.sqrt(20 + (l_bar - 50) ** 2)
    sc, sh = 1 + 0.045 * cp_bar, 1 + 0.015 * cp_bar * t
    rt = (-2 * math.sqrt(cp_bar ** 7 / (cp_bar ** 7 + 25 ** 7))
          * math.sin(math.radians(60 * math.exp(-(((h_bar - 275) / 25) ** 2)))))
    return math.sqrt((dl / sl) ** 2 + (dc / sc) ** 2 + (dH / sh) ** 2 + rt * (dc / sc) * (dH / sh))


def test_delta_e_matches_the_published_test_pairs():
    # Sharma et al.'s table gives Lab pairs; these sRGB checks are its limits: equal is 0, black/white is 100
    assert delta_e_2000("#123456", "#123456") == 0
    assert delta_e_2000("#000000", "#FFFFFF") == pytest.approx(100, abs=0.01)
    assert delta_e_2000("#FF0000", "#0000FF") == pytest.approx(52.88, abs=0.05)


def test_builtin_implementations_have_distinct_colours_and_markers():
    names = list(plots.IMPL_STYLES)
    assert {"torchvision", "hard_fused", "matrix_recompute", "allpairs"} <= set(names)
    for a, b in itertools.combinations(names, 2):
        d = delta_e_2000(plots.PINNED_COLORS[a], plots.PINNED_COLORS[b])
        assert d >= MIN_DELTA_E, f"{a} and {b} are too alike (CIEDE2000 {d:.1f})"
    assert len(set(plots.PINNED_SYMBOLS.values())) == len(names)


def test_every_registered_implementation_is_pinned():
    from nmsbench.registry import implementations

    assert set(implementations()) <= set(plots.IMPL_STYLES)


def test_later_names_get_a_fixed_style_unlike_any_builtin():
    alone = plots.impl_style("my_new_nms")
    assert plots.color_map(["my_new_nms", "torchvision", "zeta"])["my_new_nms"] == alone[0]
    assert plots.symbol_map(["zeta", "my_new_nms"])["my_new_nms"] == alone[1]
    for color in plots.EXTRA_COLORS:
        for name, pinned in plots.PINNED_COLORS.items():
            assert delta_e_2000(color, pinned) >= MIN_DELTA_E_EXTRA, f"extra {color} is too like {name}'s {pinned}"
    assert not set(plots.EXTRA_SYMBOLS) & set(plots.PINNED_SYMBOLS.values())
    styles = {plots.impl_style(f"impl_{i}") for i in range(40)}
    assert len(styles) > 20  # the hash spreads names over the colour x marker pairs
