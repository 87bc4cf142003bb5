#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Small helpers shared by the box's parts (standard library only)."""

import os
import socket
import sys
import time
import urllib.error
import urllib.request

#: The box's one Keystone region.
REGION = 'RegionOne'


class StackError(Exception):
    pass


def log(msg):
    sys.stderr.write('stack: %s\n' % msg)
    sys.stderr.flush()


def port_open(host, port, timeout=0.5):
    with socket.socket() as s:
        s.settimeout(timeout)
        return s.connect_ex((host, port)) == 0


def wait_for(predicate, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise StackError('%s exited while starting; see %s%s' % (
                proc.name, proc.out_path, tail(proc.out_path)))
        if predicate():
            return
        time.sleep(0.25)
    raise StackError('timed out after %ds waiting for %s' % (timeout, what))


def http_ok(url, timeout=2):
    """Whether *url* answers 200 (a service's readiness probe)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def tail(path, lines=15):
    """The last lines of a process's output, for an error message."""
    try:
        with open(path, errors='replace') as f:
            last = f.read().splitlines()[-lines:]
    except OSError:
        return ''
    return ''.join('\n  | ' + line for line in last)


def write_private(path, text):
    """Write *text* to *path* (mode 0600) through a rename."""
    fd = os.open(path + '.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    os.rename(path + '.tmp', path)
