# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection version, for the User-Agent.

galaxy.yml is the one source of truth. Modules run as AnsiballZ payloads that cannot read
galaxy.yml, so this constant mirrors it: `make runpod-version` rewrites it from galaxy.yml and
tests/unit/plugins/module_utils/test_version.py fails whenever the two differ.
"""

from __future__ import annotations

COLLECTION_VERSION = "0.1.0"
