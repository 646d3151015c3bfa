# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The deployment model: the site inputs, checkpoints, accelerators and platforms, the fit, replicas, disaggregation,
speculation, ports, verify checks and metrics routes, and the resolver. Private to kimi.deploy.
"""
