"""One leaderboard (``crs.scoring.leaderboard``) for the terminal and the report: its columns, its order and
its reference."""

import polars as pl

from crs.commands import tables
from crs.scoring import leaderboard, report


def _encoders(**extra):
    frame = pl.DataFrame({"encoder": ["b", "a", "ref"], "crs": [55.0, 52.0, 50.0], "crs_rank": [1.0, 2.0, 3.0],
                          "auroc": [0.8, 0.9, 0.7], "auroc_rank": [2.0, 1.0, 3.0], "calibration": [0.9] * 3,
                          "label_efficiency": [0.5] * 3, "robustness": [0.7] * 3, "tier": [True, True, False],
                          "rank_low": [1.0, 1.0, 2.0], "rank_high": [2.0, 2.0, 3.0], "p_rank1": [0.6, 0.4, 0.0],
                          "discrimination": [0.8, 0.9, 0.7],
                          "not_on_the_board": [1, 2, 3]})
    return frame.with_columns(**{k: pl.Series(v) for k, v in extra.items()})


def test_the_board_keeps_its_columns_in_their_order_and_the_rows_in_the_scores_order():
    board = leaderboard.board(_encoders())
    assert board.columns == [c for c in leaderboard.COLUMNS if c in _encoders().columns]
    assert "not_on_the_board" not in board.columns and board["encoder"].to_list() == ["b", "a", "ref"]


def test_the_reference_is_the_flagged_encoder_else_the_named_one_where_it_is_on_the_board():
    assert leaderboard.reference(_encoders(reference=[False, True, False]), "ref") == "a"
    assert leaderboard.reference(_encoders(reference=[False, False, False]), "median") is None
    assert leaderboard.reference(_encoders(), "ref") == "ref"
    assert leaderboard.reference(_encoders(), "median") is None and leaderboard.reference(_encoders(), None) is None


def test_the_terminal_and_the_report_show_the_same_board():
    encoders = _encoders(reference=[False, False, True])
    board = leaderboard.board(encoders)
    assert report.tables(report.Inputs(settings={"reference": "ref"}, rank_comparison={},
                                       tables={"encoders": encoders}))["leaderboard"].equals(board)
    rows = tables.leaderboard_rows(board, "ref")
    assert [r["encoder"] for r in rows] == board["encoder"].to_list()
    assert [r["CRS [95% interval]"].endswith("(reference)") for r in rows] == [False, False, True]
    page = report.board_html(board, "ref")
    assert page.index("data-encoder='b'") < page.index("data-encoder='a'") < page.index("data-encoder='ref'")
    assert "<tr class='row reference' data-encoder='ref'>" in page


def test_the_scale_note_links_the_definition_and_agrees_with_the_reference_row():
    from crs.commands.tables import scale_note

    board = pl.DataFrame({"encoder": ["a", "demo-resnet"], "crs": [63.0, 42.8], "reference": [False, True]})
    assert scale_note(board, "demo-resnet", "2").endswith("(docs/crs-v2.md).")
    assert scale_note(board, "demo-resnet", "1").endswith("(docs/crs-v1.md).")
    # the table shows the reference at 42.8: the note says so, and why it is not 50
    note = scale_note(board, "demo-resnet", "2")
    assert "demo-resnet itself scores 42.8 because it is dominated more than it dominates" in note
    level = board.with_columns(crs=pl.Series([63.0, 50.02]))
    assert "itself scores" not in scale_note(level, "demo-resnet", "2")
