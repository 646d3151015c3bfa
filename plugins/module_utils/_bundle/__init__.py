# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The air-gap bundle: its layout and inputs, its manifest, its apt repository. Private to kimi.deploy."""
