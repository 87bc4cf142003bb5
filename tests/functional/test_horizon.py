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

"""Horizon: the safe action where operators reach for reset-state.

``tools/stack.sh up --horizon``: PyPI Horizon with our plugin
(:mod:`cinder_forcedetach.dashboard`) on the box's Keystone and Cinder
(our tgt driver), driven by Debian's Chromium, headless, through Selenium
and Debian's chromedriver.  An admin logs in, finds in Admin > Volume >
Volume Attachments the volume a live initiator (qemu-io over libiscsi)
holds, opens its Force Detach (the dialog names the host and the export,
never the CHAP secret; a forged choice is refused), confirms it and sees
the volume available; the initiator is cut (a positive refusal, nothing
of its write on the volume's file) and the target is gone.  A volume
reset to ``detaching`` by hand shows the audit's finding in the panel;
its "Update Volume Status" in Admin > Volumes warns and offers Force
Detach, which makes it available.

``HORIZON_SCREENSHOTS=DIR`` keeps the screenshots there (README's come
from ``HORIZON_SCREENSHOTS=doc/images``); otherwise in the box's
directory, removed with it.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

from keystoneauth1.identity import v3
from keystoneauth1 import session as ks_session
from selenium.common import exceptions as selenium_exceptions
from selenium import webdriver
from selenium.webdriver.chrome import service as chrome_service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support import ui
import testtools

from cinder_forcedetach.cmd import api_client
from devbox.services import tgtd
from tests import fakes
from tests.support import cluster
from tests.support import cutoff
from tests.support import waiting

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STACK_SH = os.path.join(REPO, 'tools', 'stack.sh')
CHROMIUM = '/usr/bin/chromium'
CHROMEDRIVER = '/usr/bin/chromedriver'
WAIT = 60


class HorizonTestCase(testtools.TestCase):

    @classmethod
    def setUpClass(cls):
        super(HorizonTestCase, cls).setUpClass()
        cls.state = tempfile.mkdtemp(prefix='cfd-horizon-')
        cls.env = fakes.box_env(cls.state, horizon=True)
        up = cls.stack('up')
        if up.returncode:
            cls.stack('down')
            shutil.rmtree(cls.state, ignore_errors=True)
            raise AssertionError('stack up failed:\n' + up.stderr[-4000:])
        with open(os.path.join(cls.state, 'stack.json')) as f:
            cls.info = json.load(f)
        with open(os.path.join(cls.state, 'secrets.json')) as f:
            cls.password = json.load(f)['admin_password']
        cls.url = 'http://%s:%d' % (cls.info['host'], cls.info['horizon_port'])
        session = ks_session.Session(auth=v3.Password(
            auth_url='http://%s:%d/v3' % (cls.info['host'],
                                          cls.info['keystone_port']),
            username='admin', password=cls.password, project_name='admin',
            user_domain_id='default', project_domain_id='default'))
        cls.cinder = api_client.Client(
            session, session.get_endpoint(service_type='volumev3'),
            api_version='3.54')
        cls.shots = os.environ.get('HORIZON_SCREENSHOTS') or cls.state

    @classmethod
    def tearDownClass(cls):
        cls.stack('down')
        shutil.rmtree(cls.state, ignore_errors=True)
        super(HorizonTestCase, cls).tearDownClass()

    @classmethod
    def stack(cls, *args):
        return subprocess.run([STACK_SH] + list(args), env=cls.env,
                              capture_output=True, text=True, timeout=900)

    def setUp(self):
        super(HorizonTestCase, self).setUp()
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        profile = tempfile.mkdtemp(prefix='chromium-', dir=self.state)
        for arg in ('--headless=new', '--no-sandbox', '--disable-gpu',
                    '--disable-dev-shm-usage', '--window-size=1400,900',
                    '--user-data-dir=' + profile):
            options.add_argument(arg)
        # Debian's chromedriver: Selenium Manager would try to download one.
        self.browser = webdriver.Chrome(
            service=chrome_service.Service(CHROMEDRIVER), options=options)
        self.addCleanup(self.browser.quit)
        self.login()

    # -- the API, as a script would ----------------------------------------

    def create_volume(self, name):
        vol = self.cinder.request('POST', '/volumes', {'volume': {
            'size': 1, 'name': name}}, ok=(202,))['volume']
        self.wait_status(vol['id'], 'available')
        return vol['id']

    def wait_status(self, vol_id, status):
        waiting.wait_for(
            lambda: self.cinder.get_volume(vol_id)['status'] == status,
            120, 'volume %s %s' % (vol_id, status))

    def attach(self, vol_id, host):
        """A host's attachment (no instance) and its live initiator."""
        att = self.cinder.request('POST', '/attachments', {'attachment': {
            'volume_uuid': vol_id, 'connector': cluster.connector(host),
            'mode': 'rw'}}, ok=(200,))['attachment']
        self.cinder.request('POST', '/attachments/%s/action' % att['id'],
                            {'os-complete': None}, ok=(204,))
        info = att['connection_info']
        data = info if 'target_iqn' in info else info['data']
        session = cluster.login(data, host)
        self.addCleanup(session.close)
        cutoff.control_write(self, session, 0x5a)
        return att['id'], data, session

    def volume_file(self, vol_id):
        return os.path.join(self.state, 'volumes', 'tgt', 'volume-' + vol_id)

    def exported(self, vol_id):
        return 'volume-' + vol_id in tgtd.tgtadm(
            self.info['tgt_control_port'], '--op', 'show', '--mode',
            'target').stdout

    # -- the browser ----------------------------------------------------------

    def wait(self, condition, what):
        try:
            return ui.WebDriverWait(self.browser, WAIT).until(condition)
        except selenium_exceptions.TimeoutException:
            self.screenshot('failed')
            alerts = [a.text for a in self.browser.find_elements(
                By.CSS_SELECTOR, '.alert')]
            raise AssertionError('no %s in %d s on %s; alerts: %s' % (
                what, WAIT, self.browser.current_url, alerts))

    def screenshot(self, name):
        os.makedirs(self.shots, exist_ok=True)
        self.browser.save_screenshot(os.path.join(
            self.shots, 'horizon-%s.png' % name))

    def login(self):
        self.browser.get(self.url + '/auth/login/')
        self.wait(ec.visibility_of_element_located((By.ID, 'id_username')),
                  'login form')
        self.browser.find_element(By.ID, 'id_username').send_keys('admin')
        self.browser.find_element(By.ID, 'id_password').send_keys(
            self.password)
        self.browser.find_element(By.ID, 'loginBtn').click()
        self.wait(lambda d: '/auth/login' not in d.current_url,
                  'page after the login')

    def row(self, table, obj_id):
        return self.browser.find_element(
            By.CSS_SELECTOR, 'table#%s tr[data-object-id="%s"]' % (
                table, obj_id))

    def panel_row_text(self, vol_id):
        """The panel's row of *vol_id*, reloaded; None if not listed."""
        self.browser.get(self.url + '/admin/volume_attachments/')
        self.wait(ec.presence_of_element_located(
            (By.CSS_SELECTOR, 'table#volume_attachments')), 'the panel')
        try:
            return self.row('volume_attachments', vol_id).text
        except selenium_exceptions.NoSuchElementException:
            return None

    def click_in_row_menu(self, table, obj_id, action):
        """Open the row's action menu and click *action* in it.

        A row in a transition is replaced every few seconds (Horizon
        polls its status): a stale row is looked up again.
        """
        deadline = time.monotonic() + WAIT
        while True:
            try:
                self.row(table, obj_id).find_element(
                    By.CSS_SELECTOR, '.dropdown-toggle').click()
                self.browser.find_element(
                    By.ID, '%s__row_%s__action_%s' % (table, obj_id,
                                                      action)).click()
                return
            except (selenium_exceptions.StaleElementReferenceException,
                    selenium_exceptions.ElementNotInteractableException):
                if time.monotonic() > deadline:
                    raise

    def open_from_row_menu(self, page, table, obj_id, action, locator,
                           what):
        """Click *action* in the row's menu until *locator* shows.

        On a loaded machine a click on a row Horizon is replacing (it
        polls a row in a transition) can be lost: no dialog comes.  The
        page is loaded again and the click made again, until :data:`WAIT`
        is spent; then :meth:`wait` fails with the page's alerts.
        """
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            self.click_in_row_menu(table, obj_id, action)
            try:
                return ui.WebDriverWait(self.browser, WAIT / 4).until(
                    ec.visibility_of_element_located(locator))
            except selenium_exceptions.TimeoutException:
                self.browser.get(self.url + page)
        return self.wait(ec.visibility_of_element_located(locator), what)

    def submit_force_detach(self, choice):
        modal = self.wait(ec.visibility_of_element_located(
            (By.ID, 'force_detach_modal')), 'Force Detach dialog')
        ui.Select(modal.find_element(By.ID, 'id_target')).select_by_value(
            choice)
        modal.find_element(By.CSS_SELECTOR, '[type=submit]').click()
        return self.wait(ec.visibility_of_element_located(
            (By.CSS_SELECTOR, '.alert-success')), 'success message').text

    # -- the tests ----------------------------------------------------------

    def test_force_detach_cuts_the_live_initiator(self):
        vol_id = self.create_volume('horizon-held')
        att_id, data, session = self.attach(vol_id, 'horizon-h1')

        self.assertIn('host horizon-h1: attached',
                      self.panel_row_text(vol_id) or '')
        self.screenshot('volume-attachments')
        self.row('volume_attachments', vol_id).find_element(
            By.ID, 'volume_attachments__row_%s__action_force_detach' %
            vol_id).click()
        # The dialog names the host and the export, never a credential.
        cut = self.wait(ec.visibility_of_element_located(
            (By.ID, 'force-detach-cut')), 'what will be cut')
        self.assertIn('host horizon-h1', cut.text)
        self.assertIn('target_iqn=' + data['target_iqn'], cut.text)
        self.assertNotIn(data['auth_password'], self.browser.page_source)
        self.screenshot('force-detach')
        self.assertTrue(self.exported(vol_id))

        # A forged choice (another volume's attachment) is refused.
        self.browser.execute_script(
            "var s = document.getElementById('id_target');"
            "var o = document.createElement('option');"
            "o.value = arguments[0]; o.text = 'forged'; s.add(o);"
            "s.value = arguments[0];", str(uuid.uuid4()))
        self.browser.find_element(
            By.CSS_SELECTOR, '#force_detach_modal [type=submit]').click()
        error = self.wait(ec.visibility_of_element_located(
            (By.CSS_SELECTOR, '#force_detach_modal .has-error')),
            'the refused choice')
        self.assertIn('Select a valid choice', error.text)
        self.assertTrue(self.exported(vol_id))

        message = self.submit_force_detach(att_id)
        self.assertIn('force-detached: status available', message)
        self.assertEqual('available',
                         self.cinder.get_volume(vol_id)['status'])
        self.assertFalse(self.exported(vol_id))
        cutoff.assert_cut_off(self, session, self.volume_file(vol_id), 0xee,
                              control=session.control)
        self.assertIsNone(self.panel_row_text(vol_id))

    def test_update_status_of_a_stuck_volume_offers_force_detach(self):
        """Reset to ``detaching`` by hand: found stuck, then repaired.

        Upstream's "Update Volume Status" dialog reads the volume through
        Horizon's ``volume_get``, which asks Nova for the server of each
        attachment: a volume attached to a bare host (no server) cannot
        open it on a box without Nova, so the stuck volume here has no
        attachment.
        """
        vol_id = self.create_volume('horizon-stuck')
        self.cinder.request('POST', '/volumes/%s/action' % vol_id, {
            'os-reset_status': {'status': 'detaching'}}, ok=(202,))

        # The box's grace period is 10 s: judged once left alone that long.
        deadline = time.monotonic() + WAIT
        row = self.panel_row_text(vol_id)
        while 'stuck_transition' not in (row or '') and (
                time.monotonic() < deadline):
            time.sleep(2)
            row = self.panel_row_text(vol_id)
        self.assertIn('stuck_transition: status detaching', row or '')

        # Admin > Volume > Volumes: Force Detach is the row's first action;
        # "Update Volume Status" is in its menu.
        self.browser.get(self.url + '/admin/volumes/')
        self.wait(ec.visibility_of_element_located(
            (By.ID, 'volumes__row_%s__action_force_detach' % vol_id)),
            'Force Detach in Admin > Volumes')
        warning = self.open_from_row_menu(
            '/admin/volumes/', 'volumes', vol_id, 'update_status',
            (By.ID, 'force-detach-warning'), 'reset-state warning')
        self.assertIn('second writer', warning.text)
        self.screenshot('update-status-warning')

        warning.find_element(By.ID, 'force-detach-offer').click()
        message = self.submit_force_detach('every-host')
        self.assertIn('force-detached: status available', message)
        self.wait_status(vol_id, 'available')
        self.assertIsNone(self.panel_row_text(vol_id))
