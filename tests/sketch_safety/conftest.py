"""Shared data: the PBDS `cities` example (digest §8) and the cost-based digest's crimes table (E1)."""

from __future__ import annotations

import pyarrow as pa
import pytest

CITIES = pa.table(
    {
        "popden": [4600, 6000, 5000, 7000, 2000, 3000, 1500],
        "city": ["Chicago", "San Diego", "Sacramento", "New York", "Buffalo", "Austin", "Houston"],
        "state": ["IL", "CA", "CA", "NY", "NY", "TX", "TX"],
    }
)

CRIMES = pa.table(
    {
        "pid": [3, 4, 4, 8, 8, 2, 7, 7],
        "month": [1, 1, 1, 6, 6, 7, 2, 9],
        "year": [2010, 2013, 2013, 2015, 2015, 2016, 2022, 2023],
        "numcrimes": [88, 73, 101, 86, 96, 157, 83, 58],
    }
)


@pytest.fixture
def cities():
    return {"cities": CITIES}


@pytest.fixture
def crimes():
    return {"crimes": CRIMES}
