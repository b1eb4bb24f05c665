"""PoolOptions: the spec's names and defaults, and clear errors for bad input."""

from __future__ import annotations

import pytest

from greenpool import ConfigurationError, PoolOptions


def test_defaults_are_the_specs() -> None:
    options = PoolOptions()
    assert (options.max_pool_size, options.min_pool_size, options.max_idle_time_ms,
            options.max_connecting, options.wait_queue_timeout_ms) == (100, 0, 0, 2, 0)
    assert options.wait_queue_timeout is None and options.max_idle_time is None
    assert options.non_default() == {}


def test_spec_names_case_insensitively_and_python_names() -> None:
    from_spec = PoolOptions({"maxPoolSize": 5, "MINPOOLSIZE": 1, "maxidletimems": 250,
                             "maxConnecting": 4, "waitQueueTimeoutMS": 1500})
    from_python = PoolOptions(max_pool_size=5, min_pool_size=1, max_idle_time_ms=250,
                              max_connecting=4, wait_queue_timeout_ms=1500)
    assert from_spec == from_python
    assert from_spec.wait_queue_timeout == 1.5 and from_spec.max_idle_time == 0.25
    assert from_spec.non_default() == {"maxIdleTimeMS": 250, "minPoolSize": 1,
                                       "maxPoolSize": 5, "maxConnecting": 4,
                                       "waitQueueTimeoutMS": 1500}


def test_max_pool_size_zero_means_no_limit_and_allows_any_min() -> None:
    assert PoolOptions(max_pool_size=0, min_pool_size=50).min_pool_size == 50


@pytest.mark.parametrize(("options", "message"), [
    ({"maxPoolSize": -1}, "maxPoolSize must be an integer >= 0, not -1"),
    ({"maxPoolSize": "10"}, "maxPoolSize must be an integer >= 0, not '10'"),
    ({"maxPoolSize": 2.5}, "maxPoolSize must be an integer >= 0, not 2.5"),
    ({"maxPoolSize": True}, "maxPoolSize must be an integer >= 0, not True"),
    ({"minPoolSize": -3}, "minPoolSize must be an integer >= 0, not -3"),
    ({"maxConnecting": 0}, "maxConnecting must be an integer > 0, not 0"),
    ({"maxIdleTimeMS": -5}, "maxIdleTimeMS must be a number >= 0, not -5"),
    ({"waitQueueTimeoutMS": float("nan")}, "waitQueueTimeoutMS must be a number >= 0, not nan"),
    ({"waitQueueTimeoutMS": None}, "waitQueueTimeoutMS must be a number >= 0, not None"),
    ({"loadBalanced": "yes"}, "loadBalanced must be true or false, not 'yes'"),
    ({"backgroundThreadIntervalMS": 0},
     "backgroundThreadIntervalMS must be a number > 0, or < 0 for never, not 0"),
    ({"minPoolSize": 11, "maxPoolSize": 10},
     "minPoolSize (11) must not be greater than maxPoolSize (10)"),
    ({"maxPoolSizes": 5}, "unknown pool option 'maxPoolSizes' = 5 (did you mean 'maxPoolSize'?)"),
    ({"max_pool": 5}, "unknown pool option 'max_pool' = 5 (did you mean 'max_pool_size'?)"),
    ({7: 5}, "pool option names must be strings, not 7"),
])
def test_bad_options_name_the_option_and_value(options: dict[object, object],
                                               message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        PoolOptions(options)  # type: ignore[arg-type]
    assert str(raised.value) == message
    assert isinstance(raised.value, ValueError)


def test_bad_keyword_arguments_too() -> None:
    with pytest.raises(ConfigurationError, match="unknown pool option 'maxpool' = 3"):
        PoolOptions(maxpool=3)
    with pytest.raises(ConfigurationError, match="must be a mapping"):
        PoolOptions([("maxPoolSize", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["waitQueueSize", "waitQueueMultiple", "wait_queue_size"])
def test_deprecated_wait_queue_options_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="not supported: the CMAP specification"):
        PoolOptions({name: 10})


def test_background_interval_hook() -> None:
    assert PoolOptions(background_interval_ms=-1).background_interval is None
    assert PoolOptions({"backgroundThreadIntervalMS": 50}).background_interval == 0.05
    assert "backgroundThreadIntervalMS" not in PoolOptions(background_interval_ms=5).non_default()
