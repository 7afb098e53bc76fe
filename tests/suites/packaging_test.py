"""Tests for the packaging: what the wheel and sdist carry, and what they run.

The wheel is built as the release is (`python -m build`, no network) from a
copy of the sources and installed into a temporary directory, which
commands run elsewhere import first (each test checks that they do).
"""

import email.parser
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from unittest import mock
import zipfile

from absl.testing import absltest
from absl.testing import flagsaver

import dopamine_per
from dopamine_per import configs
from dopamine_per.discrete_domains import run_experiment
from dopamine_per.discrete_domains import train
from dopamine_per.replay_memory.kernels import choice
from tests.support import fixtures

_CONFIGS = sorted(os.path.basename(path) for path in glob.glob(
    fixtures.repo_path('configs', '*.gin')))
# What the build needs from the checkout (the sdist carries the same).
_SOURCES = ('setup.py', 'pyproject.toml', 'MANIFEST.in', 'README.md',
            'CHANGELOG.md', 'configs', 'dopamine_per')
# Console script -> its target, as setup.py declares them.
_SCRIPTS = {
    'dopamine-per-train': 'dopamine_per.discrete_domains.train:run',
    'dopamine-per-train-distributed': 'dopamine_per.distributed.train:run',
    'dopamine-per-plot': 'dopamine_per.plot:run',
    'dopamine-per-port-gin': 'dopamine_per.port_gin:main',
}


def _run(command, cwd, pythonpath=None, environ=None, **kwargs):
  """Runs `command` in `cwd`, the kernel choice unset and `environ` set."""
  env = {k: v for k, v in os.environ.items()
         if k not in (choice.ENV, 'PYTHONPATH')}
  if pythonpath:
    env['PYTHONPATH'] = pythonpath
  env.update(environ or {})
  env['TF_CPP_MIN_LOG_LEVEL'] = '2'
  return subprocess.run(command, cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=300, check=False, **kwargs)


class WheelTest(absltest.TestCase):
  """The sdist and the wheel built from it, and the wheel installed."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = tempfile.mkdtemp()
    source = os.path.join(cls.dir, 'source')
    for name in _SOURCES:
      origin = fixtures.repo_path(name)
      if os.path.isdir(origin):
        shutil.copytree(origin, os.path.join(source, name),
                        ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
      else:
        os.makedirs(source, exist_ok=True)
        shutil.copyfile(origin, os.path.join(source, name))
    dist = os.path.join(cls.dir, 'dist')
    result = _run([sys.executable, '-m', 'build', '--no-isolation',
                   '--outdir', dist, source], cwd=cls.dir)
    assert result.returncode == 0, result.stdout + result.stderr
    cls.wheel, = glob.glob(os.path.join(dist, '*.whl'))
    cls.sdist, = glob.glob(os.path.join(dist, '*.tar.gz'))
    cls.site = os.path.join(cls.dir, 'site')
    result = _run([sys.executable, '-m', 'pip', 'install', '--quiet',
                   '--no-deps', '--no-index', '--no-cache-dir',
                   '--target', cls.site, cls.wheel], cwd=cls.dir)
    assert result.returncode == 0, result.stdout + result.stderr
    # An unrelated directory, where no configs/ lies.
    cls.elsewhere = os.path.join(cls.dir, 'elsewhere')
    os.mkdir(cls.elsewhere)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    super().tearDownClass()

  def _wheel_metadata(self, name):
    with zipfile.ZipFile(self.wheel) as wheel:
      return wheel.read('dopamine_per-{}.dist-info/{}'.format(
          dopamine_per.__version__, name)).decode('utf-8')

  def _installed(self, *arguments, environ=None):
    """Runs the installed package's Python in the unrelated directory."""
    return _run([sys.executable] + list(arguments), cwd=self.elsewhere,
                pythonpath=self.site, environ=environ)

  def _script(self, name, *arguments):
    return _run([os.path.join(self.site, 'bin', name)] + list(arguments),
                cwd=self.elsewhere, pythonpath=self.site)

  def test_the_wheel_carries_every_config(self):
    self.assertNotEmpty(_CONFIGS)
    with zipfile.ZipFile(self.wheel) as wheel:
      shipped = {name[len('dopamine_per/configs/'):]: wheel.read(name)
                 for name in wheel.namelist()
                 if name.startswith('dopamine_per/configs/') and
                 name.endswith('.gin')}
    self.assertEqual(sorted(shipped), _CONFIGS)
    for name in _CONFIGS:
      with open(fixtures.repo_path('configs', name), 'rb') as f:
        self.assertEqual(shipped[name], f.read(), name)

  def test_the_sdist_carries_the_configs_and_the_build_files(self):
    with tarfile.open(self.sdist) as sdist:
      names = sdist.getnames()
    top = 'dopamine_per-{}/'.format(dopamine_per.__version__)
    for name in (['configs/' + config for config in _CONFIGS] +
                 ['setup.py', 'pyproject.toml', 'MANIFEST.in', 'CHANGELOG.md',
                  'README.md', 'dopamine_per/configs/__init__.py']):
      self.assertIn(top + name, names)

  def test_readme_names_this_wheel(self):
    with open(fixtures.repo_path('README.md'), encoding='utf-8') as f:
      self.assertIn("pip install '{}[gym]'".format(
          os.path.basename(self.wheel)), f.read())

  def test_requirements_and_extras(self):
    metadata = email.parser.Parser().parsestr(self._wheel_metadata('METADATA'))
    self.assertEqual(metadata['Version'], dopamine_per.__version__)
    # No Numba, nor its 'fast' extra: the native kernels replace it.
    for requirement in metadata.get_all('Requires-Dist'):
      self.assertNotIn('numba', requirement.lower())
    extras = metadata.get_all('Provides-Extra')
    self.assertContainsSubset({'test', 'bench'}, extras)
    self.assertNotIn('fast', extras)

  def test_console_scripts_and_their_targets(self):
    entry_points = self._wheel_metadata('entry_points.txt')
    for script, target in _SCRIPTS.items():
      self.assertIn('{} = {}'.format(script, target), entry_points)
      self.assertTrue(os.access(os.path.join(self.site, 'bin', script),
                                os.X_OK), script)
    # Each target imports from the installed copy and is callable.
    check = ('import importlib, sys\n'
             'for target in sys.argv[2:]:\n'
             '  module, function = target.split(":")\n'
             '  module = importlib.import_module(module)\n'
             '  assert module.__file__.startswith(sys.argv[1]), module\n'
             '  assert callable(getattr(module, function)), target\n')
    result = self._installed('-c', check, self.site, *_SCRIPTS.values())
    self.assertEqual(result.returncode, 0, result.stderr)

  def test_help_lists_the_flags(self):
    # absl lists a boolean flag as --[no]NAME.
    trainer = ['--base_dir', '--gin_files', '--gin_bindings',
               '--[no]list_configs', '--[no]restart_from_scratch']
    expected = {
        'dopamine-per-train': trainer,
        'dopamine-per-train-distributed': trainer + ['--ray_address'],
        'dopamine-per-plot': ['--out', '--label', 'NAME=GLOB', 'RUN_DIR'],
        # The module docstring's table of rewrites, too.
        'dopamine-per-port-gin': ['usage: python -m dopamine_per.port_gin',
                                  '--in_place',
                                  'dopamine.tf.agents.PKG.MODULE'],
    }
    self.assertCountEqual(expected, _SCRIPTS)
    for script, flag_names in expected.items():
      result = self._script(script, '--help')
      # absl's --help exits with status 1, argparse's with 0.
      self.assertIn(result.returncode, (0, 1), result.stderr)
      for flag_name in flag_names:
        self.assertIn(flag_name, result.stdout, script)

  def test_installed_configs_by_name(self):
    script = ('import sys\n'
              'from dopamine_per import configs\n'
              'print(configs.directory())\n'
              'print(configs.resolve("rainbow_cartpole"))\n'
              'print(configs.resolve("dqn.gin"))\n')
    result = self._installed('-c', script)
    self.assertEqual(result.returncode, 0, result.stderr)
    package = os.path.join(self.site, 'dopamine_per', 'configs')
    self.assertEqual(result.stdout.split('\n')[:3], [
        package, os.path.join(package, 'rainbow_cartpole.gin'),
        os.path.join(package, 'dqn.gin')])
    for command in (['-m', 'dopamine_per.configs'],
                    ['-m', 'dopamine_per.discrete_domains.train',
                     '--list_configs']):
      result = self._installed(*command)
      self.assertEqual(result.returncode, 0, result.stderr)
      self.assertIn(package, result.stdout)
      for name in _CONFIGS:
        self.assertIn('  ' + name[:-len('.gin')] + '\n', result.stdout)

  def test_installed_trainer_refuses_an_unknown_name_in_one_line(self):
    result = self._script('dopamine-per-train', '--base_dir=run',
                          '--gin_files=rainbow_cartpol')
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertEqual(result.stderr.count('\n'), 1, result.stderr)
    self.assertStartsWith(result.stderr,
                          'train: error: gin file not found: rainbow_cartpol')
    for name in _CONFIGS:
      self.assertIn(name[:-len('.gin')], result.stderr)
    self.assertFalse(os.path.exists(os.path.join(self.elsewhere, 'run')))

  def test_installed_kernels_are_the_native_ones(self):
    # Built from the sources the wheel carries, on first use, into a fresh
    # cache.
    result = self._installed(
        '-c', 'import os\n'
        'from dopamine_per.replay_memory import sum_tree\n'
        'from dopamine_per.replay_memory.kernels import choice\n'
        'print(choice.__file__, choice.choose("auto").name,\n'
        '      type(sum_tree.SumTree(8, kernels="auto")._kernels).__name__,\n'
        '      len(os.listdir(os.environ["DOPAMINE_PER_NATIVE_CACHE"])))',
        environ={'DOPAMINE_PER_NATIVE_CACHE': fixtures.temp_dir(self)})
    self.assertEqual(result.returncode, 0, result.stderr)
    path, name, tree_kernels, built = result.stdout.split()
    self.assertTrue(path.startswith(self.site), path)
    self.assertEqual(name, 'native')
    self.assertEqual(tree_kernels, 'NativeKernels')
    self.assertGreater(int(built), 0)
    self.assertNotIn('cannot be built', result.stderr)


class KernelsTest(absltest.TestCase):
  """NumPy's loops warn once standing in (choose itself: kernels_test)."""

  def test_a_memory_without_a_compiler_warns_in_one_line(self):
    script = (
        'import numpy as np\n'
        'from dopamine_per.replay_memory import prioritized_replay_buffer\n'
        'for _ in range(2):\n'
        '  memory = prioritized_replay_buffer.'
        'OutOfGraphPrioritizedReplayBuffer(\n'
        '      observation_shape=(4,), stack_size=1, replay_capacity=100,\n'
        '      batch_size=4, observation_dtype=np.float32, kernels="auto")\n'
        'assert not memory._kernels.compiled\n')
    result = _run([sys.executable, '-c', script], cwd=fixtures.REPO_ROOT,
                  pythonpath=os.pathsep.join(p for p in sys.path if p),
                  environ={'CXX': 'no-such-compiler',
                           'DOPAMINE_PER_NATIVE_CACHE':
                               fixtures.temp_dir(self)})
    self.assertEqual(result.returncode, 0, result.stderr)
    lines = [line for line in result.stderr.splitlines()
             if 'cannot be built' in line]
    self.assertLen(lines, 1, result.stderr)
    self.assertIn('the native kernels cannot be built here (no C++ '
                  "compiler: 'no-such-compiler' is not on PATH", lines[0])
    self.assertIn('runs its NumPy loops', lines[0])
    self.assertIn('install g++', lines[0])  # The reason's remedy.


class ConfigsTest(absltest.TestCase):
  """dopamine_per.configs in the checkout (and the editable install)."""

  def test_names_are_the_checkout_s_configs(self):
    self.assertEqual(configs.directory(), fixtures.repo_path('configs'))
    self.assertEqual(configs.names(),
                     [name[:-len('.gin')] for name in _CONFIGS])
    for name in configs.names():
      self.assertIn('\n  {}'.format(name), configs.listing())

  def test_resolve(self):
    expected = fixtures.repo_path('configs', 'rainbow_cartpole.gin')
    self.assertEqual(configs.resolve('rainbow_cartpole'), expected)
    self.assertEqual(configs.resolve('rainbow_cartpole.gin'), expected)
    self.assertEqual(configs.path('rainbow_cartpole'), expected)
    self.assertEqual(configs.resolve('gs://bucket/x.gin'), 'gs://bucket/x.gin')
    self.assertEqual(configs.resolve(expected), expected)

  def test_a_file_wins_over_a_shipped_name(self):
    directory = fixtures.temp_dir(self)
    with open(os.path.join(directory, 'rainbow_cartpole.gin'), 'w') as f:
      f.write('Runner.num_iterations = 1\n')
    cwd = os.getcwd()
    os.chdir(directory)
    self.addCleanup(os.chdir, cwd)
    self.assertEqual(configs.resolve('rainbow_cartpole.gin'),
                     'rainbow_cartpole.gin')
    self.assertEqual(configs.resolve('rainbow_cartpole'),
                     configs.path('rainbow_cartpole'))

  def test_unknown_names_and_missing_paths(self):
    shipped = ', '.join(configs.names())
    with self.assertRaises(FileNotFoundError) as raised:
      configs.resolve('rainbow_cartpol')
    self.assertEqual(
        str(raised.exception),
        'gin file not found: rainbow_cartpol, and no shipped config has that '
        'name (shipped: {})'.format(shipped))
    with self.assertRaisesRegex(
        FileNotFoundError, r'^gin file not found: no/such/rainbow\.gin \(to '
        r'use the shipped config of that name, pass --gin_files=rainbow\)$'):
      configs.resolve('no/such/rainbow.gin')
    with self.assertRaises(FileNotFoundError) as raised:
      configs.resolve('no/such/file.gin')
    self.assertEqual(
        str(raised.exception),
        'gin file not found: no/such/file.gin (or pass a shipped config by '
        'name; shipped: {})'.format(shipped))
    with self.assertRaisesRegex(
        ValueError, r"^no shipped gin config is named 'nope' \(shipped: "):
      configs.path('nope')

  def test_none_installed(self):
    with mock.patch.object(configs, '_PACKAGE_DIR', '/nonexistent'), \
        mock.patch.object(configs, '_CHECKOUT_DIR', '/nonexistent'):
      self.assertIsNone(configs.directory())
      self.assertEqual(configs.names(), [])
      with self.assertRaisesRegex(ValueError, 'reinstall dopamine_per'):
        configs.path('rainbow_cartpole')
      self.assertIn('reinstall dopamine_per', configs.listing())


class TrainerTest(absltest.TestCase):
  """The trainer loads a shipped config by name, on every entry point."""

  def test_names_are_resolved_before_loading(self):
    base_dir = fixtures.temp_dir(self)
    runner = mock.Mock()
    create_runner = mock.Mock(return_value=runner)
    if not train.FLAGS.is_parsed():  # Under pytest; absltest parses them.
      train.FLAGS.mark_as_parsed()
      self.addCleanup(train.FLAGS.unparse_flags)
    with mock.patch.object(run_experiment, 'load_gin_configs') as load, \
        flagsaver.flagsaver(base_dir=base_dir,
                            gin_files=['rainbow_cartpole', 'dqn.gin'],
                            gin_bindings=[]):
      # With the create_runner_fn that the distributed trainer passes.
      self.assertEqual(train.main(['train'], create_runner_fn=create_runner),
                       0)
    load.assert_called_once_with(
        [configs.path('rainbow_cartpole'), configs.path('dqn')], [])
    create_runner.assert_called_once_with(base_dir)
    runner.run_experiment.assert_called_once_with()


if __name__ == '__main__':
  absltest.main()
