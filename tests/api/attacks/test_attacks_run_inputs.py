"""Issue 16's attack list, run as one fuzz-style table: every hostile input (configs,
checkpoints, data files) ends in exactly one line ``neonlite: error: ...`` naming the right
thing, never a traceback or a silent success.  The table attack -> outcome -> message is
written to ``attacks.tsv`` in the test's temporary folder (nothing is printed)."""
import pytest
from support.attacks import ATTACKS, classify, make_good, run_attack


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_good(tmp_path_factory.mktemp("good"))


def test_every_attack_gives_its_one_line_error(tmp_path, capsys, good):
    rows, wrong = [], []
    for i, (attack, (_, phrase)) in enumerate(ATTACKS.items()):
        folder = tmp_path / f"attack{i}"
        folder.mkdir()
        status, err = run_attack(attack, folder, good, capsys)
        outcome = classify(status, err)
        message = err.strip().splitlines()[-1] if err.strip() else ""
        rows.append(f"{attack}\t{outcome}\t{message[:300]}")
        if outcome != "one-line error" or phrase.lower() not in message.lower():
            wrong.append(f"{attack}: {outcome}: {message[:300] or err[-300:]}")
    (tmp_path / "attacks.tsv").write_text("attack\toutcome\tmessage\n" + "\n".join(rows) + "\n")
    assert not wrong, "\n".join(wrong)
    assert len(rows) >= 40
