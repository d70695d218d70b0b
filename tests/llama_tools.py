"""llama.cpp's built tools for the tests that check outputs with llama.cpp itself."""

import os
import shutil

import pytest


def llama_tool(name):
    """A llama.cpp tool from $MOETOOLS_LLAMA_BIN (a folder) or PATH, else skip."""
    folder = os.environ.get("MOETOOLS_LLAMA_BIN")
    found = os.path.join(folder, name) if folder else shutil.which(name)
    if not found or not os.access(found, os.X_OK):
        pytest.skip(f"{name} not found (set MOETOOLS_LLAMA_BIN to the folder of llama.cpp's tools)")
    return found
