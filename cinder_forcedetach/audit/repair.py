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

"""``audit --fix``: each finding repaired through our force-detach flow.

Backend teardown (revoke, fence, remove export) runs first and Cinder's
rows change only after it succeeded (the flow's order); every repair is
idempotent, so a crash half-way or a second run finds less, then nothing.
A refused finding (an instance active on it, Nova not consulted, Nova's
own to repair) is never touched; at most *limit* repairs run.
"""

from __future__ import annotations

import functools
from typing import (Any, cast, Collection, Iterable, Optional,
                    TYPE_CHECKING)

from oslo_log import log as logging

from cinder_forcedetach.audit import cases
from cinder_forcedetach.flows import force_detach as flow
from cinder_forcedetach import notifications

if TYPE_CHECKING:
    from cinder import context as cinder_context

LOG = logging.getLogger(__name__)


def _run(context: cinder_context.RequestContext, driver: Any,
         finding: cases.Finding) -> None:
    from cinder import objects

    if finding.action == cases.LIFT_FENCE:
        driver.lift_fence(finding.addr)
        return
    volume = objects.Volume.get_by_id(context.elevated(read_deleted='yes'),
                                      finding.volume_id)
    # Each repair is a forced detach of reason audit (counted, notified).
    run = functools.partial(flow.run, context, driver, volume,
                            reason=notifications.AUDIT)
    if finding.action == cases.REVOKE:
        run(connector=finding.connector)
    elif finding.action == cases.DETACH:
        run(attachment_id=finding.attachment_id)
    elif finding.action == cases.DETACH_ALL:
        run()
    elif finding.action == cases.RESUME:
        for connector in finding.connectors or [None]:
            run(connector=connector)
    elif finding.action == cases.TEARDOWN:
        run(reset_database=False)
    else:
        raise ValueError('no repair for %s' % finding.action)


def fix(context: cinder_context.RequestContext,
        findings: Iterable[cases.Finding], drivers: dict[str, Any],
        limit: int = cases.DEFAULT_FIX_LIMIT,
        only: Optional[Collection[str]] = None) -> int:
    """Repair *findings* in order (:func:`.cases.fix_each`).

    :param drivers: backend (``host@backend``) -> its volume driver.
    :param only: case names to repair (default: every case).
    :returns: how many repairs ran (successful or not).
    """
    def repair(finding: cases.Finding) -> None:
        try:
            # Only a refused finding (Nova's) has no backend.
            _run(context, drivers[cast(str, finding.backend)], finding)
        except Exception as err:
            LOG.error('Repair of %(case)s on volume %(vol)s failed: '
                      '%(err)s', {'case': finding.case,
                                  'vol': finding.volume_id, 'err': err})
            raise
    return cases.fix_each(findings, repair, limit=limit, only=only)
