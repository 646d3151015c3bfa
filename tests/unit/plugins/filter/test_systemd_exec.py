"""kimi.deploy.systemd_exec: every argument one word of an ExecStart line, read back by systemd's rules unchanged.

The round trip uses a reader of systemd's quoted words (systemd.syntax: the C escapes, then %% and $$ for the unit's
specifiers and environment expansion); where systemd-analyze exists, the unit is also checked by systemd itself."""
import os
import re
import shutil
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kimi.deploy.plugins.filter.systemd_exec import systemd_exec

HOSTILE = ["plain", "64\n--port 9", "a\rb", "tab\tx", "\x1b[31m", "del\x7f", "nel\x85", "ls\u2028ps\u2029",
           'say "hi"', "back\\slash", "100%", "%n", "$HOME", "${HOME}", "$$", "it's", "`id`", "$(reboot)", "; rm -rf /",
           "\u00e9t\u00e9", "\U0001f600", " lead", "trail ", "", "--host=0.0.0.0 --port=1"]

ESC = {"\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
       "s": " "}


def read_back(line):
    """The words of an ExecStart value as systemd reads double-quoted words."""
    words, pos = [], 0
    while pos < len(line):
        if line[pos] == " ":
            pos += 1
            continue
        assert line[pos] == '"', "an unquoted word at %d: %r" % (pos, line[pos:])
        pos += 1
        word = []
        while line[pos] != '"':
            char = line[pos]
            if char == "\\":
                kind = line[pos + 1]
                if kind in ESC:
                    word.append(ESC[kind])
                    pos += 2
                else:
                    size = {"x": 2, "u": 4, "U": 8}[kind]
                    word.append(chr(int(line[pos + 2:pos + 2 + size], 16)))
                    pos += 2 + size
            elif char in "%$":
                assert line[pos + 1] == char, "a lone %s would be expanded: %r" % (char, line)
                word.append(char)
                pos += 2
            else:
                assert 0x20 <= ord(char) < 0x7F, "a raw %r in the line" % char
                word.append(char)
                pos += 1
        words.append("".join(word))
        pos += 1
    return words


@pytest.mark.parametrize("value", HOSTILE)
def test_each_argument_comes_back_as_one_word_unchanged(value):
    argv = ["/usr/bin/docker", "run", "--rm", "router:1", "--policy", value, "--port", "30001"]
    line = systemd_exec(argv)
    assert "\n" not in line and "\r" not in line and all(0x20 <= ord(c) < 0x7F for c in line)
    assert read_back(line) == argv


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze on this machine")
def test_systemd_accepts_the_unit_with_every_hostile_argument(tmp_path):
    unit = tmp_path / "kimi-test-exec.service"
    unit.write_text("[Unit]\nDescription=test\n[Service]\nType=oneshot\nExecStart=%s\n" % systemd_exec(
        ["/bin/true"] + HOSTILE))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                          check=False, env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
    problems = [line for line in proc.stderr.splitlines() if re.search(r"kimi-test-exec|escape|quot", line, re.I)]
    assert not problems, proc.stderr


def test_a_nul_is_refused_naming_the_argument():
    with pytest.raises(AnsibleFilterError, match="argument 2 holds a NUL"):
        systemd_exec(["/bin/true", "ok", "nul\x00x"])


def test_not_a_list_is_refused():
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        systemd_exec("--port 9")
    with pytest.raises(AnsibleFilterError, match="no argument"):
        systemd_exec([])
