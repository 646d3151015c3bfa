# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Kernel caches that survive restarts: what an engine compiles and autotunes at start-up (torch.compile, Triton,
FlashInfer, DeepGEMM JIT), kept on a host folder per cache key. Private to kimi.deploy.

The engine data (_engines/<engine>.py, `kernel_cache`, per build with a per-version override) says which environment
variables move each cache; kimi_serve mounts <HOST_DIR>/<key> at CONTAINER_DIR and points those variables into it. The
key hashes everything that changes the compiled kernels: a cache built for another key is never mounted, because its
folder has another name. The host folder is the model's (`kimi_deployment.kernel_cache.host_dir`): kimi_serve keeps the
caches there (kimi_serve_kernel_cache_dir defaults to it), kimi_weights' peer cache serves its published ones
(kimi_weights_peer_kernel_dir) and bundle.yml carries them (kimi_bundle_kernel_caches), none of them naming it itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

# Where the container sees its key's folder.
CONTAINER_DIR = "/root/.cache/kimi-kernels"
# The host folder that holds one folder per key (and each published key's archive and marker beside it).
HOST_DIR = "/var/cache/kimi-k26/kernels"

# The parts of a key, in order: the deployment's (known where it is resolved) and the host's (read by kimi_serve: the
# image it pulled, the accelerators' architecture and driver).
DEPLOYMENT_PARTS = ("engine_build", "engine_version", "image", "quant", "kv_cache_dtype", "moe_backend", "tp", "pp",
                    "dp", "attention_dp", "nodes", "context_length", "speculative", "extra_args", "engine_config")
HOST_PARTS = ("image_digest", "arch", "driver_version")
KEY_PARTS = DEPLOYMENT_PARTS + HOST_PARTS

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class KernelCacheError(ValueError):
    pass


def spec_of(engine_spec, version):
    """The kernel cache data of one release: the version's own entry where it has one, else the build's; None where
    the engine keeps nothing worth carrying."""
    release = engine_spec["versions"][version]
    return release.get("kernel_cache", engine_spec.get("kernel_cache"))


def container_env(spec):
    """{variable: its folder in the container} for a kernel cache spec (empty for None)."""
    if not spec:
        return {}
    return dict((name, "%s/%s" % (CONTAINER_DIR, sub)) for name, sub in sorted(spec["env"].items()))


def deployment_parts(deployment):
    """The deployment's share of the key, from a resolved deployment (a missing field counts as None)."""
    speculative = deployment.get("speculative") or {}
    parts = dict((name, deployment.get(name)) for name in DEPLOYMENT_PARTS)
    # The method and draft change what compiles; the knobs of the draft tree change CUDA graph shapes too.
    parts["speculative"] = dict((k, speculative.get(k)) for k in sorted(speculative) if k != "flags") or None
    return parts


def entry(engine_spec, version, deployment):
    """The deployment's kernel_cache entry: host_dir (the host folder of the keys' folders), container_dir, env, primary
    (the variable whose folder the engine fills first), precompile, sources, key_parts; None where the release keeps no
    cache."""
    spec = spec_of(engine_spec, version)
    if not spec:
        return None
    return {
        "host_dir": HOST_DIR,
        "container_dir": CONTAINER_DIR,
        "env": container_env(spec),
        "primary": spec["primary"],
        "precompile": spec.get("precompile"),
        "sources": spec.get("sources", ""),
        "key_parts": deployment_parts(deployment),
    }


def cache_key(parts):
    """The key of a kernel cache: "<engine build>-<version>-<24 hex of sha256>" over every KEY_PARTS value (a
    readable prefix, a hash that changes with any part). parts: a dict with every name of KEY_PARTS."""
    if not isinstance(parts, dict):
        raise KernelCacheError("kernel cache key parts must be a dict, got %s" % type(parts).__name__)
    missing = [name for name in KEY_PARTS if name not in parts]
    if missing:
        raise KernelCacheError("kernel cache key parts lack %s" % ", ".join(missing))
    canonical = json.dumps([[name, parts[name]] for name in KEY_PARTS], sort_keys=True, separators=(",", ":"),
                           default=str)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]
    prefix = _UNSAFE.sub("_", "%s-%s" % (parts["engine_build"], parts["engine_version"]))
    return "%s-%s" % (prefix, digest)
