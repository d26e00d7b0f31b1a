"""One identity, one spelling (issue 10 item 7): a name outside the documented set is refused
at every entry point, never folded onto an ASCII user; ASCII upper-case canonicalises."""

from __future__ import annotations

import hashlib
import hmac
import re
import shutil
import time
from pathlib import Path

import pytest

from api.auth import TokenAuth, Unauthenticated, sign_token, token_hash
from cli import main
from governance.config import ApiConfig, ApiToken, Config
from governance.errors import ConfigError, LakegateError
from governance.identity import InvalidName, canonical_group, canonical_user
from governance.policy.model import Principal

REFERENCE = Path(__file__).resolve().parents[2] / "policies"
SECRET = "identity-secret-0123456789"

# name -> the code point the refusal must name (never the raw, possibly bidi, name itself)
LOOKALIKES = {
    "kelvin_sign": ("\u212aarl", "U+212A KELVIN SIGN"),
    "fullwidth_letters": ("\uff4b\uff41\uff52\uff4c", "U+FF4B FULLWIDTH LATIN SMALL LETTER K"),
    "turkish_dotless_i": ("\u0131rem", "U+0131 LATIN SMALL LETTER DOTLESS I"),
    "turkish_dotted_capital_i": ("\u0130rem", "U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE"),
    "ligature_ff": ("je\ufb00", "U+FB00 LATIN SMALL LIGATURE FF"),
    "combining_mark": ("jose\u0301", "U+0301 COMBINING ACUTE ACCENT"),
    "zero_width_joiner": ("ka\u200drl", "U+200D ZERO WIDTH JOINER"),
    "rtl_override": ("\u202elrak", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    "cyrillic_a": ("k\u0430rl", "U+0430 CYRILLIC SMALL LETTER A"),
    "space": ("karl x", "U+0020 SPACE"),
}
CASES = [pytest.param(name, why, id=case) for case, (name, why) in LOOKALIKES.items()]


def _signed(user: str, expiry: int | None = None) -> str:
    """A token signed over `user` as given, the way a careless identity provider would."""
    body = f"{user}.{expiry or int(time.time()) + 600}"
    return f"{body}.{hmac.new(SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()}"


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(("name", "why"), CASES)
def test_lookalike_names_are_refused_naming_the_code_point(name: str, why: str) -> None:
    for canonical in (canonical_user, canonical_group):
        with pytest.raises(InvalidName) as e:
            canonical(name)
        assert why in str(e.value) and name not in str(e.value)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("Karl", "karl"),
        ("KARL", "karl"),
        ("a.b_c-d+e@x.io", "a.b_c-d+e@x.io"),
        ("x" * 128, "x" * 128),
    ],
)
def test_uppercase_ascii_is_fine_and_canonicalises(raw: str, canonical: str) -> None:
    assert canonical_user(raw) == canonical


@pytest.mark.parametrize("raw", ["", "x" * 129, None], ids=["empty", "overlong", "not_text"])
def test_empty_overlong_or_non_text_names_are_refused(raw: object) -> None:
    with pytest.raises(InvalidName):
        canonical_user(raw)


# --------------------------------------------------------------------------- tokens


@pytest.mark.parametrize(("name", "why"), CASES)
def test_signed_token_for_a_lookalike_never_authenticates(name: str, why: str) -> None:
    auth = TokenAuth(ApiConfig(secret=SECRET))
    assert auth.authenticate(f"Bearer {_signed('karl')}").user == "karl"
    with pytest.raises(Unauthenticated, match=r"^invalid token$"):
        auth.authenticate(f"Bearer {_signed(name)}")


def test_signed_token_for_uppercase_ascii_user_is_the_lowercase_user() -> None:
    auth = TokenAuth(ApiConfig(secret=SECRET))
    assert auth.authenticate(f"Bearer {_signed('KARL')}").user == "karl"


@pytest.mark.parametrize(
    "token",
    [
        _signed("karl")[:-1] + "\u0661",  # an Arabic-Indic digit in the signature
        "karl.\u0661\u0662\u0663.00",  # Arabic-Indic digits as the expiry
    ],
    ids=["non_ascii_signature", "non_ascii_expiry"],
)
def test_signed_token_with_non_ascii_parts_is_invalid_not_an_error(token: str) -> None:
    with pytest.raises(Unauthenticated, match=r"^invalid token$"):
        TokenAuth(ApiConfig(secret=SECRET)).authenticate(f"Bearer {token}")


def test_sign_token_refuses_to_mint_for_a_lookalike() -> None:
    with pytest.raises(InvalidName, match="KELVIN SIGN"):
        sign_token(SECRET, "\u212aarl")


def test_hashed_token_user_in_code_built_config_is_refused_not_folded() -> None:
    cfg = ApiConfig(tokens=(ApiToken("\u212aarl", token_hash("t-1")),))
    with pytest.raises(InvalidName, match="KELVIN SIGN"):
        TokenAuth(cfg)


# --------------------------------------------------------------------------- lakegate.yaml


@pytest.mark.parametrize(("name", "why"), CASES)
def test_config_refuses_a_lookalike_token_user_naming_the_entry(
    tmp_path: Path, name: str, why: str
) -> None:
    (tmp_path / "lakegate.yaml").write_text(
        f'api:\n  tokens:\n    - {{user: ok, sha256: "{token_hash("a")}"}}\n'
        f'    - {{user: "{name}", sha256: "{token_hash("b")}"}}\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"api\.tokens\[1\]\.user") as e:
        Config.load(tmp_path / "lakegate.yaml")
    assert why in str(e.value)


def test_config_token_user_in_uppercase_ascii_canonicalises(tmp_path: Path) -> None:
    (tmp_path / "lakegate.yaml").write_text(
        f'api:\n  tokens:\n    - {{user: Karl, sha256: "{token_hash("a")}"}}\n'
    )
    assert Config.load(tmp_path / "lakegate.yaml").api.tokens[0].user == "karl"


# --------------------------------------------------------------------------- policies


@pytest.mark.parametrize(("name", "why"), CASES)
@pytest.mark.parametrize(
    ("template", "line", "code"),
    [
        (
            "grants:\n  - principals: [alice]\n    privileges: [select]\n"
            "    on: main.sales.orders\n  - principals: ['{q}']\n    privileges: [select]\n"
            "    on: main.sales.orders\n",
            5,
            "bad-principal",
        ),
        (
            "grants:\n  - principals: ['group:{q}']\n    privileges: [select]\n"
            "    on: main.sales.orders\n",
            2,
            "bad-principal",
        ),
        ("groups:\n  ops: [alice]\n  '{q}': [bob]\n", 3, "bad-name"),
        ("groups:\n  ops:\n    - alice\n    - '{q}'\n", 4, "bad-principal"),
    ],
    ids=["user_principal", "group_principal", "group_name", "group_member"],
)
def test_policy_validate_rejects_a_lookalike_principal_with_file_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    template: str,
    line: int,
    code: str,
    name: str,
    why: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REFERENCE, tmp_path / "policies")
    # YAML single-quoted scalars take the characters as they are (RTL override included).
    (tmp_path / "policies" / "zz.yaml").write_text(template.format(q=name), encoding="utf-8")
    assert main(["policy", "validate", "policies"]) == 1
    out = capsys.readouterr()
    report = out.out + out.err
    assert f"zz.yaml:{line}:" in report and f"error[{code}]" in report and why in report


def test_policy_principal_in_uppercase_ascii_canonicalises() -> None:
    assert [Principal.parse(p).key for p in ("KARL", "user:Karl", "group:Ops")] == [
        "user:karl",
        "user:karl",
        "group:ops",
    ]


def test_policy_explain_refuses_a_lookalike_user(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["policy", "explain", "--user", "\u212aarl", "--dir", str(REFERENCE), "main.sales.orders"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--user" in err and len(err.splitlines()) == 1


# --------------------------------------------------------------------------- sessions and CLI


@pytest.mark.parametrize(("name", "why"), CASES)
def test_session_for_a_lookalike_user_is_refused(lakehouse, name: str, why: str) -> None:
    with pytest.raises(LakegateError, match=re.escape(why)):
        lakehouse.session(name)


def test_session_user_in_uppercase_ascii_canonicalises(lakehouse) -> None:
    assert lakehouse.session("CAROL").user == "carol"


def test_cli_user_lookalike_is_a_usage_error_in_one_line(
    lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            "--config",
            str(lakehouse.config.path),
            "explain",
            "--user",
            "c\u0430rol",
            "SELECT id FROM main.sales.orders",
        ]
    )
    out = capsys.readouterr()
    assert (rc, out.out, len(out.err.splitlines())) == (2, "", 1)
    assert "U+0430 CYRILLIC SMALL LETTER A" in out.err
