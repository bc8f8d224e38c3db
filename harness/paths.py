"""Where things live. No heavy imports here: the CLI, the arms and the tests import it before torch."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS_DIR = ROOT / "scenarios"
MODELS_DIR = ROOT / "models"
PATCHES_DIR = ROOT / "patches"
RESULTS_DIR = ROOT / "results"
CACHE_DIR = ROOT / ".cache"


def model_config_path(name: str) -> Path:
    return MODELS_DIR / f"{name}.json"
