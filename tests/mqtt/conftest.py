"""MQTT test fixtures: a factory of recording subscribers (support.subscriber, closed afterwards); the real mosquitto
per test, ``broker``, is shared (tests/conftest.py). Helpers shared by the test modules are in mqtt_helpers.py."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber


@pytest.fixture
def subscriber_factory() -> Iterator[Callable[..., Subscriber]]:
    made: list[Subscriber] = []

    def make(broker: Mosquitto, topics: list[str], **kwargs: Any) -> Subscriber:
        sub = Subscriber(broker, topics, **kwargs)
        made.append(sub)
        return sub

    yield make
    for sub in made:
        sub.close()


