# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection version, for the User-Agent.

galaxy.yml is the one source of truth. Modules run as AnsiballZ payloads that cannot read
galaxy.yml, so this constant mirrors it: `make version` rewrites it from galaxy.yml and
tests/e2e/test_version.py fails whenever any copy differs.
"""

from __future__ import annotations

COLLECTION_VERSION = "0.1.0"
