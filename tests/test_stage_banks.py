"""examples/sass/stage_banks.py: the bank model behind "h200-s34" run 4 (the tensor-core down's B loads)."""


def test_wavefronts_count_lines_per_bank_group_in_each_quarter(stage_banks):
    # 32 lanes reading 512 contiguous bytes: each quarter one 128-byte line, one wavefront each
    assert stage_banks.wavefronts([16 * i for i in range(32)]) == 4
    # every lane in its own line at the same bank group: 8 lines per quarter
    assert stage_banks.wavefronts([128 * i for i in range(32)]) == 32
    # a quarter with two lines on the same four groups: two wavefronts there
    two = [0, 32, 64, 96, 256, 288, 320, 352] + [16 * i for i in range(8, 32)]
    assert stage_banks.wavefronts(two) == 2 + 3


def test_fp8_rows_by_pair_conflict_at_even_pairs_and_adjacent_never(stage_banks):
    for n in (22, 44, 88, 132):
        assert stage_banks.mean_wavefronts("fp8", "pair", n) == 8.0
        assert stage_banks.mean_wavefronts("fp8", "adjacent", n) == 4.0
    for n in (11, 33):
        assert stage_banks.mean_wavefronts("fp8", "pair", n) == 4.0


def test_mxfp4_needs_its_two_rows_64_bytes_apart(stage_banks):
    assert stage_banks.mean_wavefronts("mxfp4", "pair", 44) == 4.0  # N % 8 == 4
    for n in (11, 22, 33, 88, 176, 187):  # N % 8 != 4
        assert stage_banks.mean_wavefronts("mxfp4", "pair", n) == 8.0
        assert stage_banks.mean_wavefronts("mxfp4", "adjacent", n) == 8.0
        assert stage_banks.mean_wavefronts("mxfp4", "split", n) == 4.0  # the kernel's layout
    # the model's lo_row0 is the header's
    assert [stage_banks.lo_row0(n) for n in (11, 12, 176, 187)] == [12, 12, 180, 188]
