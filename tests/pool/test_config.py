"""The SLP's options and their checks (hltmt_plugin/pool/config.py): each bad option one line
naming it; good options give the high-resource languages, in the order given."""

import pytest

from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.pool.config import SlpConfig, check_slp

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

LANGS = ["en", "de", "fr", "gu", "hi"]


def test_good_options_give_the_high_resource_languages_in_their_order():
    assert check_slp(SlpConfig(high_resource_langs=" fr, de ", slp_pool_size=2), LANGS) == ["fr", "de"]
    assert SlpConfig(high_resource_langs="fr,de").high_langs == ["fr", "de"]
    assert check_slp(SlpConfig(), LANGS) == [] and SlpConfig().slp_pool_size == 3  # no pool


@pytest.mark.parametrize(
    "options, message",
    [
        ({"slp_language_specific": True}, "--slp-language-specific gives each language of --high-resource-langs"),
        ({"high_resource_langs": "de,xx"}, "--high-resource-langs names xx, not in the language list"),
        ({"high_resource_langs": "de,de", "slp_pool_size": 1}, "--high-resource-langs lists a language twice"),
        ({"high_resource_langs": "de,fr"}, r"--slp-pool-size must lie in \[1, 2\] .* got 3"),
        ({"high_resource_langs": "de,fr", "slp_pool_size": 0}, r"--slp-pool-size must lie in \[1, 2\]"),
        (
            {"high_resource_langs": "de,fr", "slp_pool_size": 2, "slp_hidden_dim": 0},
            "--slp-hidden-dim must be positive",
        ),
        (
            {"high_resource_langs": "de,fr,gu", "slp_pool_size": 2, "slp_language_specific": True},
            "its own module: set --slp-pool-size 3",
        ),
        (
            {"high_resource_langs": "de,fr", "slp_pool_size": 2, "slp_hard_prob": 1.5},
            r"--slp-hard-prob must lie in \[0, 1\]",
        ),
    ],
)
def test_each_bad_option_is_one_line_naming_it(options, message):
    with pytest.raises(HltmtConfigError, match=message):
        check_slp(SlpConfig(**options), LANGS)


def test_a_pool_module_too_large_to_allocate_is_refused():
    with pytest.raises(HltmtConfigError, match="--slp-hidden-dim"):
        check_slp(SlpConfig(high_resource_langs="de,fr", slp_pool_size=2, slp_hidden_dim=10**15), LANGS, width=10**6)
