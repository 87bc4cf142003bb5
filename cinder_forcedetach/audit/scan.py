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

"""One audit pass: read every source, classify, repair with ``fix``."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from typing import Any, Callable, Collection, Iterator, Optional, TYPE_CHECKING

from oslo_utils import timeutils

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import repair
from cinder_forcedetach.audit import sources

if TYPE_CHECKING:
    from cinder import context as cinder_context


@dataclasses.dataclass
class Report(object):
    findings: list
    skipped: dict
    #: sources that could not be read, with why
    unreachable: list
    nova_read: bool

    def summary(self, fix: bool = False) -> dict[str, Any]:
        by_case: dict[str, int] = {}
        for finding in self.findings:
            by_case[finding.case] = by_case.get(finding.case, 0) + 1
        result = {'found': len(self.findings), 'by case': by_case,
                  'not audited': dict(self.skipped),
                  'unreachable': list(self.unreachable),
                  'nova consulted': self.nova_read}
        if fix:
            result['repaired'] = sum(1 for f in self.findings
                                     if f.result == cases.REPAIRED)
        return result


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Leave the cycle collector off while a pass builds its records.

    A pass makes hundreds of thousands of records with no reference cycle
    among them; each collection would walk them all again (at 100,000
    attachments the classification took 3.4 s with it, see
    ``benchmarks/audit_scale.py``).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run(context: cinder_context.RequestContext, drivers: dict[str, Any],
        name_template: str, backend_of: sources.BackendOf,
        read_nova: Optional[Callable[[], cases.Nova]] = None,
        grace: float = 0, fix: bool = False,
        limit: int = cases.DEFAULT_FIX_LIMIT,
        only: Optional[Collection[str]] = None,
        broken: Optional[dict[str, str]] = None) -> Report:
    """Audit the backends of *drivers*; repair with *fix*.

    :param drivers: ``host@backend`` -> its volume driver.
    :param backend_of: ``f(volume host, cluster_name)`` -> ``host@backend``.
    :param read_nova: ``f() -> cases.Nova`` (may raise
        :class:`sources.Unreachable`); None: Nova is not consulted.
    :param broken: ``host@backend`` -> why its driver could not be built.
    :raises sources.Unreachable: Cinder's database cannot be read.
    """
    with no_cycle_collection():
        return _run(context, drivers, name_template, backend_of, read_nova,
                    grace, fix, limit, only, broken)


def _run(context: cinder_context.RequestContext, drivers: dict[str, Any],
         name_template: str, backend_of: sources.BackendOf,
         read_nova: Optional[Callable[[], cases.Nova]], grace: float,
         fix: bool, limit: int, only: Optional[Collection[str]],
         broken: Optional[dict[str, str]]) -> Report:
    cinder = sources.CinderDB(context, name_template, backend_of)
    volumes, attachments = cinder.read()
    backends = {name: cases.Backend(name, error=why)
                for name, why in (broken or {}).items()}
    for name, driver in drivers.items():
        backends[name] = sources.read_backend(name, driver)
        if not backends[name].error:
            sources.attach_holders(backends[name], cinder, volumes)
    unreachable = ['backend %s: %s' % (name, b.error)
                   for name, b in sorted(backends.items()) if b.error]
    nova = None
    if read_nova is not None:
        try:
            nova = read_nova()
        except sources.Unreachable as err:
            unreachable.append(str(err))
    snapshot = cases.Snapshot(volumes, attachments, backends, nova,
                              now=timeutils.utcnow())
    findings, skipped = cases.classify(snapshot, grace=grace)
    if fix:
        repair.fix(context, findings, drivers, limit=limit, only=only)
    return Report(findings, skipped, unreachable, nova is not None)
