# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Hugging Face hub client, the hub cache layout, the resumable download and the page cache. Private to
kimi.deploy.
"""
