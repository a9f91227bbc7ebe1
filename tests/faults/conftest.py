from tests.scaleout.fixtures import deployments  # noqa: F401  (fixture)
