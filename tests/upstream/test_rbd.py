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

"""Upstream's RBD driver tests (from the cinder wheel) on our RBDDriver."""

from unittest import mock

from cinder_forcedetach.drivers import rbd as our_rbd
from tests import upstream

UPSTREAM = 'cinder.tests.unit.volume.drivers.test_rbd'

module = upstream.load_upstream(UPSTREAM, 'cinder.volume.drivers.rbd',
                                RBDDriver=our_rbd.RBDDriver)
upstream.mark_differences(module, UPSTREAM)
_upstream_configuration = module.RBDTestCase._make_configuration.__func__


def _make_configuration(cls, conf_in=None):
    """Upstream's mocked configuration, with our options' defaults.

    Upstream sets the options its driver reads on a ``Mock``; an option
    only ours has would read as a ``Mock`` (a keyring path, a list of
    image formats) where a real configuration gives its default, and the
    test would fail on that instead of on what it asserts.
    """
    cfg = _upstream_configuration(cls, conf_in)
    ours = {opt.name: opt.default
            for opt in our_rbd.RBDDriver.get_driver_options()
            if opt.name.startswith('forcedetach_')}
    for name, default in ours.items():
        if name not in (conf_in or {}):
            setattr(cfg, name, default)
    cfg.safe_get = mock.Mock(side_effect=lambda name: getattr(cfg, name)
                             if name in ours else mock.DEFAULT)
    return cfg


module.RBDTestCase._make_configuration = classmethod(_make_configuration)


def load_tests(loader, standard_tests, pattern):
    return loader.loadTestsFromModule(module)
