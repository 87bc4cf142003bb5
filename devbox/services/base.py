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

"""One interface for every service of the box, and what they all get.

A :class:`Service` says what it is (``name``, ``requires``, its processes
and ports, its databases and Keystone users) and how it lives
(``write_conf``, ``start``, ``ready``, ``stop_process``, ``status``).  The
orchestrator (:class:`devbox.stack.Stack`) hands every service the same
:class:`Context`: the settings, the stack's recorded settings (``info``),
directories, secrets, the processes' records, and the other services by
name.  A service reads another one only through ``ctx.service(name)``.
"""

import json
import os
import secrets
import subprocess
import urllib.request

from devbox import boxutil
from devbox import process

StackError = boxutil.StackError


class Service(object):
    """A service of the box.  Subclasses fill in what applies to them."""

    #: The registry's key; a one-process service's process name.
    name = ''
    #: Services that must be ready before this one starts, when enabled.
    requires = ()
    #: {database: key of its user's password in secrets.json}: MariaDB
    #: makes them, each with a user of the database's name.
    databases = {}
    #: Keystone users in the service project (password ``USER_password``).
    keystone_users = ()
    #: Other keys of secrets.json the service reads.
    secret_keys = ()

    def enabled(self, info):
        """Whether a stack with settings *info* runs this service."""
        return True

    def processes(self, info):
        """Names of its processes for *info*, in start order."""
        return [self.name]

    def known_processes(self):
        """Every process name it may have recorded, whatever the settings."""
        return self.processes({})

    def ports(self, info):
        """{process: ports it listens on}; checked free before a start."""
        return {}

    def catalog(self, ctx):
        """(Keystone service name, type, public URL) it adds to the catalog."""
        return []

    def write_conf(self, ctx):
        """Write its configuration under the state directory."""

    def start(self, ctx):
        """Start what is not running and wait until it is ready; idempotent.

        What every ``up`` repeats (accounts, databases, types) runs even
        when the processes were already alive.
        """
        raise NotImplementedError

    def ready(self, ctx):
        """Whether it answers (its readiness probe)."""
        return True

    def stop_process(self, ctx, proc):
        """Stop one of its processes: SIGTERM, SIGKILL after a grace."""
        killed = proc.stop()
        if killed:
            boxutil.log('%s: SIGKILLed %s after %ds' % (
                proc.name, ', '.join(str(p) for p, _s in killed),
                process.STOP_GRACE))

    def stop(self, ctx):
        """After its processes, what ``down`` stops that has no record."""

    def detail(self, ctx, name):
        """(detail, healthy) of a live process *name* for ``status``."""
        return '', True

    def status(self, ctx):
        """Rows ``(name, running, pid, detail, healthy)`` for ``status``."""
        rows = []
        for name in self.processes(ctx.info):
            proc = ctx.proc(name)
            alive = proc.alive()
            detail, healthy = self.detail(ctx, name) if alive else ('', False)
            rows.append((name, alive, proc.pid if alive else None, detail,
                         alive and healthy))
        return rows

    def ready_lines(self, ctx):
        """Lines of ``up``'s summary about this service."""
        return []

    def commands(self, ctx):
        """Lines of ``up``'s summary: commands to try."""
        return []


class WsgiService(Service):
    """A service of one process under gunicorn, answering HTTP on a port."""

    #: The stack setting (``info`` key) that holds its port.
    port_key = ''
    #: The path its readiness probe asks; 200 means ready.
    probe = ''

    def url(self, info):
        return url(info, self.port_key)

    def ports(self, info):
        return {self.name: [info[self.port_key]]}

    def ready(self, ctx):
        return boxutil.http_ok(self.url(ctx.info) + self.probe)

    def detail(self, ctx, name):
        ok = self.ready(ctx)
        return '%s%s %s' % (self.url(ctx.info), self.probe, answers(ok)), ok


def url(info, port_key):
    """``http://HOST:PORT`` of the stack's *port_key* setting."""
    return 'http://%s:%d' % (info['host'], info[port_key])


def answers(ok):
    return 'answers' if ok else 'NOT answering'


class Context(object):
    """What the orchestrator passes to each service.

    *settings*: the requested settings (:class:`devbox.stack.Settings`);
    *registry*: the services by name; ``info``: the running stack's
    settings, as in ``STATE/stack.json`` (they win over the environment).
    """

    def __init__(self, settings, registry):
        self.s = settings
        self.dir = settings.dir
        self.run_dir = os.path.join(self.dir, 'run')
        self.log_dir = os.path.join(self.dir, 'logs')
        self.info_path = os.path.join(self.dir, 'stack.json')
        self.secrets_path = os.path.join(self.dir, 'secrets.json')
        self.registry = registry
        #: What this ``up`` started, in order: undone if it fails.
        self.started = []
        self.info = {}
        if os.path.exists(self.info_path):
            with open(self.info_path) as f:
                self.info = json.load(f)
        self._token = None

    # -- the stack's parts ----------------------------------------------------

    def service(self, name):
        return self.registry[name]

    def enabled(self, name):
        return self.registry[name].enabled(self.info)

    def proc(self, name):
        return process.Proc(self, name)

    def save_info(self):
        with open(self.info_path, 'w') as f:
            json.dump(self.info, f, indent=1)

    def secrets(self):
        """The stack's passwords (``STATE/secrets.json``, mode 0600).

        Made once; a key a service added since is made when first read.
        """
        wanted = ['rabbit_password']
        for svc in self.registry.values():
            wanted += list(svc.databases.values()) + list(svc.secret_keys)
            wanted += [user + '_password' for user in svc.keystone_users]
        data = {}
        if os.path.exists(self.secrets_path):
            with open(self.secrets_path) as f:
                data = json.load(f)
        missing = [k for k in wanted if k not in data]
        if missing or 'rabbit_user' not in data:
            data.setdefault('rabbit_user', 'cinder')
            data.update((k, secrets.token_hex(16)) for k in missing)
            boxutil.write_private(self.secrets_path, json.dumps(data))
        return data

    # -- tools of the services --------------------------------------------

    def venv_bin(self, name):
        path = os.path.join(self.info['venv'], 'bin', name)
        if not os.path.exists(path):
            raise StackError('%s not found: run tools/stack.sh up to '
                             'install the venv' % path)
        return path

    def manage(self, name, args, env=None, cwd=None, ok=(0,)):
        """Run ``NAME --config-file ... ARGS`` (a ``*-manage`` step).

        *args*: the config file options, then the step; *ok*: its exit
        codes that mean success.  Its output goes to LOG/NAME.out.
        """
        out = os.path.join(self.log_dir, name + '.out')
        with open(out, 'ab') as f:
            res = subprocess.run(
                [self.venv_bin(name)] + args, stdin=subprocess.DEVNULL,
                stdout=f, stderr=subprocess.STDOUT, cwd=cwd or self.dir,
                timeout=300, env=dict(os.environ, **(env or {})))
        if res.returncode not in ok:
            raise StackError('%s %s failed; see %s%s' % (
                name, ' '.join(args[2:]), out, boxutil.tail(out)))

    def gunicorn(self, proc, app, port, env, cwd):
        """Start a WSGI *app* under gunicorn, as a process of the stack.

        One worker; threads only with MariaDB (SQLite locks under them).
        ``--no-control-socket``: gunicorn's default control socket is
        shared by every gunicorn of the user.
        """
        proc.start([self.venv_bin('gunicorn'), '--workers', '1',
                    '--threads', '4' if self.info.get('db') == 'mariadb'
                    else '1', '--timeout', '180', '--no-control-socket',
                    '--bind', '%s:%d' % (self.info['host'], port), app],
                   env=dict(os.environ, **env), cwd=cwd)

    def sync_then_serve(self, proc, manage, step, conf_path, app, port,
                        env, ready):
        """A WSGI service of the box: its database *step*, then its *app*.

        ``MANAGE --config-file CONF_PATH STEP...``, then *app* under
        gunicorn on *port* (configuration directory through *env*), until
        *ready* answers.
        """
        conf_dir = os.path.dirname(conf_path)
        self.manage(manage, ['--config-file', conf_path] + step,
                    cwd=conf_dir)
        self.gunicorn(proc, app, port, env, conf_dir)
        boxutil.wait_for(ready, self.s.timeout, proc.name, proc)

    def database_url(self, name, directory):
        """Service *name*'s database: MariaDB's, or SQLite in *directory*."""
        if self.info.get('db') != 'mariadb':
            return 'sqlite:///%s' % os.path.join(directory, name + '.sqlite')
        return self.service('mariadb').url(self, name)

    def auth_token(self):
        """noauth's ``admin:PROJECT``, or a Keystone token of the admin."""
        if not self.info.get('keystone'):
            return 'admin:%s' % self.info['project_id']
        if not self._token:
            self._token = self.service('keystone-api').token(self)
        return self._token

    def http_json(self, url, method, body=None, headers=None, timeout=10):
        """A JSON call as the box's admin; the decoded answer or {}."""
        req = urllib.request.Request(
            url, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers=dict({'X-Auth-Token': self.auth_token(),
                          'Content-Type': 'application/json'},
                         **(headers or {})))
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = resp.read()
        return json.loads(data) if data else {}
