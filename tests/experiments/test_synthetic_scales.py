"""The synthetic CLI's scales say what they cost: ``smoke`` is a handful of short runs (a pipeline check of
well under a minute), and the help names the scales that start multi-hour CPU runs."""
import pytest

from ddesys.experiments.synthetic import __main__ as cli


def _runs(argv):
    args = cli._parse(argv)
    s = cli._settings(args)
    return args, s, len(args.task_list) * len(s["models"]) * len(s["seeds"]) * len(s["lrs"])


def test_smoke_is_a_few_short_runs_over_every_task_kind():
    args, s, n = _runs(["--scale", "smoke"])
    assert n <= 6 and s["steps"] <= 5 and s["eval_every"] < s["steps"]          # evaluation runs twice
    assert sorted({t.kind for t in args.task_list}) == ["copy", "sum", "wsum"]
    assert {"ds4d", "s4d"} <= set(s["models"])


def test_protocols_default_to_the_scales_and_can_be_given():
    assert {t.name for t in cli._parse(["--scale", "smoke"]).task_list} == {
        "copy-variable", "sum-variable", "wsum-variable"}
    assert {t.name.split("-")[1] for t in cli._parse(["--scale", "cpu"]).task_list} == {"fixed", "variable"}
    given = cli._parse(["--scale", "smoke", "--tasks", "copy", "--protocols", "fixed"]).task_list
    assert [t.name for t in given] == ["copy-fixed"]
    _, _, n = _runs(["--scale", "cpu"])
    assert n == 54                                               # the default: the multi-hour sweep


def test_help_states_the_cost_of_each_scale(capsys):
    with pytest.raises(SystemExit):
        cli._parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--scale smoke # about half a minute" in text and "smoke: a pipeline check, about half a minute" in text
    assert "cpu (default): a multi-hour CPU run" in text and "days on a CPU" in text
