"""docs/ cannot go stale: every generated block equals what the code computes now (docs/generate.py),
and the closed forms docs/ states without another test are checked here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from helpers import time_of

from hcclsim.network.topology import build_flat, build_hierarchical

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


gen = _load_generator()


def test_committed_docs_match_the_code():
    drifts = gen.run(gen.doc_files(), write=False)          # one computation per block, cached
    assert not drifts, "docs drifted; run `make docs`:\n" + "\n".join(str(d) for d in drifts)


def test_every_doc_with_numbers_has_generated_blocks():
    with_blocks = {p.name for p in gen.doc_files() if gen.MARK.search(p.read_text(encoding="utf-8"))}
    assert {"algorithms.md", "packet.md", "config.md"} <= with_blocks
    studies = {p.name for p in (ROOT / "docs" / "studies").glob("*.md")} - {"README.md"}
    assert studies <= with_blocks, "a study page quotes `hccl-bench run` numbers without generated blocks"


def _doc(*specs) -> str:
    """A document whose blocks hold exactly what the code computes now (inline, then on lines of their own)."""
    parts = [f"It takes <!-- generated: {specs[0]} -->{gen.generate(specs[0])}<!-- /generated --> µs."]
    parts += [f"<!-- generated: {sp} -->\n{gen.generate(sp)}\n<!-- /generated -->" for sp in specs[1:]]
    return "\n\n".join(parts) + "\n"


def test_drift_is_reported_with_file_and_block():
    spec = "time switch8 all_reduce ring 256"
    text = _doc(spec, "switch8-allreduce")
    assert gen.check_text(text, "docs/algorithms.md") == []
    value = gen.generate(spec)
    bad = text.replace(f"-->{value}<!--", "-->99.999<!--")       # one number changed
    drifts = gen.check_text(bad, "docs/algorithms.md")
    assert [(d.file, d.block) for d in drifts] == [("docs/algorithms.md", spec)]
    assert "docs/algorithms.md" in str(drifts[0]) and spec in str(drifts[0])


def test_drift_in_a_table_names_the_table_block():
    text = _doc("time switch8 all_reduce ring 256", "switch8-allreduce")
    row = next(line for line in text.splitlines() if line.startswith("| 1 GiB"))
    cells = row.split(" | ")
    cells[2] = "1.000"                                       # the winner's time
    bad = text.replace(row, " | ".join(cells))
    assert [d.block for d in gen.check_text(bad, "docs/algorithms.md")] == ["switch8-allreduce"]


def test_unknown_block_names_are_errors():
    with pytest.raises(KeyError, match="unknown generated block 'nope'"):
        gen.check_text("<!-- generated: nope -->x<!-- /generated -->", "x.md")


def test_rewrite_then_check_is_clean(tmp_path):
    spec = "default ring chunk_size"
    doc = tmp_path / "d.md"
    doc.write_text(f"chunks of <!-- generated: {spec} -->1 MiB<!-- /generated --> each\n\n"
                   "<!-- generated: chunks tree all_reduce switch8 1M -->\nstale\n<!-- /generated -->\n")
    assert len(gen.run([doc], write=True)) == 2
    assert gen.run([doc], write=False) == []
    text = doc.read_text()
    assert "chunks of <!-- generated: default ring chunk_size -->128 KiB<!-- /generated --> each" in text
    assert "<!-- generated: chunks tree all_reduce switch8 1M -->\n8\n<!-- /generated -->" in text  # 1 MiB / 128 KiB


STUDY = """[scenario]
title = "t"
reproduces = "r"

[[sweep]]
name = "s"
topology = "switch8"
algorithms = ["ring", "direct_twoshot"]
sizes = ["1K", "1M"]
"""


def test_study_blocks_read_a_scenario_section(tmp_path):
    """docs/studies/*.md: one value, a ratio of two rows and a pivot, from `hccl-bench run`'s table."""
    path = tmp_path / "study.toml"
    path.write_text(STUDY, encoding="utf-8")
    frame = gen.study_frame(str(path), "s")
    ring = frame[(frame.algorithm == "ring") & (frame.size_bytes == 1 << 20)].time_us.iloc[0]
    two = frame[(frame.algorithm == "direct_twoshot") & (frame.size_bytes == 1 << 20)].time_us.iloc[0]
    assert gen.generate(f"study {path} s time_us algorithm=ring size_bytes=1M fmt=.3f") == f"{ring:.3f}"
    assert gen.generate(f"study-ratio {path} s time_us algorithm=ring size_bytes=1M / "
                        f"algorithm=direct_twoshot size_bytes=1M") == f"{ring / two:.2f}"
    table = gen.generate(f"study-table {path} s rows=algorithm cols=size_bytes values=time_us fmt=.3f")
    assert table.splitlines()[0] == "| algorithm | 1 KiB | 1 MiB |"
    assert "| `ring` | " in table and f"{ring:.3f} |" in table
    with pytest.raises(ValueError, match="2 rows match"):
        gen.generate(f"study {path} s time_us algorithm=ring")


# Closed forms stated in docs/ that no other test checks in full ----------------------------------------

@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
@pytest.mark.parametrize("P", [1, 4, 16])
@pytest.mark.parametrize("n", [3, 8])
def test_chain_broadcast_and_reduce_pay_alpha_per_wave(coll, P, n):
    """docs/model.md, docs/algorithms.md: the chain takes (N-2+P)(alpha + S/(P B)), alpha = 2 hops."""
    hop, bw = 500e-9, 50e9
    topo = build_flat("s", "switch", n, bw, hop)
    size = P * 4 * 1024 * 3
    for root in (0, n - 1):
        t = time_of(f"ring:chunks={P}", coll, topo, size, root=root)
        assert t == pytest.approx((n - 2 + P) * (2 * hop + size / (P * bw)), rel=1e-12)


def test_two_channels_double_the_flat_ring_on_two_tiers():
    """docs/algorithms.md (ring, channels): at zero latency the flat ring on D domains of L ranks is
    bound by one scale-out NIC direction, busbw = B_out; the counter-rotating second ring uses the other
    direction of the same NICs, 2 B_out; a third and fourth ring share those again."""
    L, D, b_up, b_out = 8, 4, 400e9, 50e9
    topo = build_hierarchical("t", "switch", L, b_up, 0.0, False, "fat_tree", D, b_out, 0.0)
    n, size = L * D, 1 << 26
    factor = 2 * (n - 1) / n

    def bw(spec):
        return size / time_of(spec, "all_reduce", topo, size) * factor

    assert bw("ring:rails=off") == pytest.approx(b_out, rel=1e-9)
    assert bw("ring:rails=off:channels=2") == pytest.approx(2 * b_out, rel=1e-9)
    assert bw("ring:rails=off:channels=4") == pytest.approx(2 * b_out, rel=1e-9)
