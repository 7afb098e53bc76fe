"""Checks README.md: its setup commands exist and its Python examples run."""

import os
import re
import tempfile

from absl.testing import absltest

from tests.support import fixtures

README_PATH = fixtures.repo_path('README.md')

_FENCED_BLOCK = re.compile(r'^```(\w*)\n(.*?)^```', re.MULTILINE | re.DOTALL)


def fenced_blocks(text, language):
  """Returns the contents of the ```language fenced blocks of `text`."""
  return [body for lang, body in _FENCED_BLOCK.findall(text)
          if lang == language]


class ReadmeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    with open(README_PATH, encoding='utf-8') as readme:
      cls.text = readme.read()

  def test_opens_with_the_title_then_the_two_setup_commands(self):
    title, sentence, rest = self.text.split('\n\n', 2)
    self.assertEqual(title, '# dopamine_per')
    self.assertIn('replay', sentence)
    self.assertFalse(sentence.startswith(('#', '`')), sentence)
    first_block = _FENCED_BLOCK.match(rest)
    self.assertIsNotNone(first_block,
                         'the title and one paragraph come before the commands')
    self.assertEqual(first_block.group(1), 'bash')
    commands = [line.split('#')[0].strip()
                for line in first_block.group(2).splitlines()]
    self.assertEqual(commands, ['bash scripts/train.sh', 'bash scripts/test.sh'])

  def test_commands_name_existing_scripts(self):
    for script in ('scripts/train.sh', 'scripts/test.sh', 'scripts/demo.sh'):
      self.assertTrue(os.path.isfile(fixtures.repo_path(script)), script)

  def test_python_examples_run(self):
    blocks = fenced_blocks(self.text, 'python')
    self.assertGreaterEqual(len(blocks), 2)
    for number, block in enumerate(blocks):
      with self.subTest(block=number):
        # Each example runs on its own, in a fresh namespace and an empty
        # working directory (in case it writes files).
        cwd = os.getcwd()
        with tempfile.TemporaryDirectory() as workdir:
          os.chdir(workdir)
          try:
            code = compile(block, f'README.md, python block {number}', 'exec')
            exec(code, {'__name__': f'readme_block_{number}'})  # pylint: disable=exec-used
          finally:
            os.chdir(cwd)


if __name__ == '__main__':
  absltest.main()
