"""Implementation colours and markers: fixed per name, colour-blind-safe, no two alike."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

pytest.importorskip("plotly", reason="figures need plotly")

from nmsbench import plots, registry, tables  # noqa: E402

# The smallest CIEDE2000 difference allowed between two implementations' colours: about
# where two thin lines stop being told apart at a glance (2.3 is "just noticeable").
MIN_DELTA_E = 20.0
# A later name may share a marker shape with no built-in one, so its colour may sit closer.
MIN_DELTA_E_EXTRA = 15.0


@pytest.fixture
def toy():
    """Registers toy implementations (``toy(name, style=...)``) for one test, removed after it."""
    names = []

    def register(name: str, style=None):
        names.append(name)
        return registry.register(name=name, family="hard", devices=("cpu",), style=style)(lambda boxes, scores, **kw: None)

    yield register
    for name in names:
        registry.unregister(name)


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


def clashes(styles: dict[str, tuple[str, str]]) -> list[str]:
    """Every pair of ``styles`` too alike to tell apart: colours closer than MIN_DELTA_E, or one marker."""
    found = []
    for (a, (color_a, symbol_a)), (b, (color_b, symbol_b)) in itertools.combinations(styles.items(), 2):
        d = delta_e_2000(color_a, color_b)
        if d < MIN_DELTA_E:
            found.append(f"{a} and {b} are too alike (CIEDE2000 {d:.1f})")
        if symbol_a == symbol_b:
            found.append(f"{a} and {b} share the marker {symbol_a}")
    return found


def test_registered_implementations_have_distinct_colours_and_markers():
    styles = registry.styles()
    assert {"torchvision", "hard_fused", "matrix_recompute", "allpairs"} <= set(styles)
    assert clashes(styles) == []


def test_every_registered_implementation_carries_a_style():
    unstyled = sorted(name for name, impl in registry.implementations().items() if impl.style is None)
    assert unstyled == [], "give each a register(..., style=(colour, marker)) far from the others"


def test_a_variant_registered_with_a_style_too_like_anothers_fails_the_check(toy):
    toy("too_like_hard_fused", style=("#D65F02", "star-open"))
    assert clashes(registry.styles()) == ["hard_fused and too_like_hard_fused are too alike (CIEDE2000 0.3)"]
    toy("same_marker_as_torchvision", style=("#FFFFFF", "circle"))
    assert "same_marker_as_torchvision" in " ".join(clashes(registry.styles()))


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


def test_a_new_variant_needs_only_its_module_to_get_its_look(toy):
    """A variant's registration alone gives its lines their colour and marker; one without
    a style gets a fixed one of its own, unlike every registered implementation's."""
    toy("toy_styled", style=("#6A3D9A", "star-open"))
    toy("toy_plain")
    rows = pd.DataFrame({"impl": ["toy_styled", "toy_plain", "torchvision"] * 2, "n": [64] * 3 + [128] * 3,
                         "median_us": [1.0, 2.0, 3.0, 2.0, 4.0, 6.0], "iqr_us": 0.1, "status": "ok", "scenario": "uniform",
                         "family": "hard", "device": "cpu", "timer": "wall"})
    fig = plots.time_vs_n(tables.prepare(rows))
    looks = {t.meta["impl"]: (t.line.color, t.marker.symbol) for t in fig.data if t.meta["role"] == "line"}
    assert looks["toy_styled"] == ("#6A3D9A", "star-open")
    assert looks["torchvision"] == registry.style_of("torchvision")
    plain = looks["toy_plain"]
    assert plain == plots.impl_style("toy_plain") and registry.style_of("toy_plain") is None
    assert plain[0] in plots.EXTRA_COLORS and plain[1] in plots.EXTRA_SYMBOLS
    assert all(plain[1] != symbol for symbol in plots.PINNED_SYMBOLS.values() if symbol)
    assert all(delta_e_2000(plain[0], color) >= MIN_DELTA_E_EXTRA
               for name, color in plots.PINNED_COLORS.items() if name != "toy_styled")


def test_a_style_is_checked_and_given_once_per_name(toy):
    with pytest.raises(ValueError, match="style must be"):
        toy("toy_bad", style=("red", "circle"))
    toy("toy_twice", style=("#6A3D9A", "star-open"))
    with pytest.raises(ValueError, match="already registered with the style"):
        registry.register(name="toy_twice", family="hard", devices=("cuda",), style=("#000001", "circle"))(lambda: None)
    registry.register(name="toy_twice", family="hard", devices=("cuda",))(lambda: None)  # the style given once is kept
    assert registry.style_of("toy_twice") == ("#6A3D9A", "star-open")


def test_the_styles_read_from_source_are_the_registered_ones():
    """The dashboard reads the built-ins' styles from their source (no torch); they equal
    what the registry holds once the modules are imported."""
    from nmsbench.styles import declared_styles

    declared = declared_styles()
    assert declared and set(declared) <= set(registry.implementations())
    for name, style in declared.items():
        assert style == registry.registered_styles()[name], name


def test_reading_styles_from_source_skips_quoted_parentheses_comments_and_mentions():
    from nmsbench.styles import styles_in

    source = '''
"""Mentions register( in a docstring, unclosed."""
# register(name="commented", style=("#000000", "x"))

@register(name="a", family="hard", summary="keeps (most) boxes ) here", style=("#112233", "circle"))
def a(): ...

register(
    name="b",  # a comment with a ) in it
    summary=\'\'\'three quotes ( and " inside\'\'\',
    style=("#445566", "square"),
)
register(name="no style")
register(name=NAME, style=("#778899", "x"))
'''
    assert styles_in(source) == {"a": ("#112233", "circle"), "b": ("#445566", "square")}
    assert styles_in("x = 1") == {}
