# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The engines as data: one module per engine build, the registry, the command line reader, the routers, the engine
log reader. Private to kimi.deploy.
"""
