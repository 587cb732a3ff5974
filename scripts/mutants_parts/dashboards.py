"""Mutants of the dashboards (issue 27, 28): event files read past their damage
(src/resgrad/formats/events.py), a resumed run's TensorBoard history rebuilt from the
records, run names, the custom-scalars layout, --force and --log-dir refusals, wandb/trackio
fresh or resumed (src/resgrad/train/trackers.py, the logging part of train/loop.py), the
dashboard flags (cli/_common.py), `dynamics --export` (cli/lab_cmds.py), and the export
guard of `resgrad export` (formats/hf.py, train/pretrained.py).

These replace the table's mutants whose source text this change removed (see
/tmp/notes/dashboards.md): "events: a record's data CRC is not checked", the three
"events: a trim ..." ones, "trackers: a resume does not trim ...", "trackers: a resume
writes no purge ...", "trackers: an export's wall time counts the step itself",
"trackers: an export replaces a directory without --force", "trackers: a fresh run logs
into another run's TensorBoard directory", "trackers: an experiment cell's log directory
counts as another run's", "trackers: a fresh run keeps the events of its own killed
start", "trackers: a resumed wandb run gets a new id", "loop: a refused run leaves its
TensorBoard directory" and "pretrained: export_checkpoint always forces"."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mutants import Mutant  # noqa: E402

EVENTS = ("tests/formats/test_events.py",)
NAMES = ("tests/train/test_tb_names.py",)
RESUME = ("tests/train/test_tb_resume.py",)
TRACKERS = ("tests/train/test_trackers.py",)
CLI = ("tests/cli/test_cli_dashboards.py",)
EV = "formats/events.py"
TR = "train/trackers.py"
LOOP = "train/loop.py"
LAB = "cli/lab_cmds.py"
COMMON = "cli/_common.py"
HF = "formats/hf.py"
PRE = "train/pretrained.py"

MUTANTS = [
    # durability: event files read past their damage, a resume's history rebuilt and kept
    Mutant("events: the reader stops at the first damaged record (the records after it lost)",
           EV, "        nxt = _framed_end(data, pos)  # the data is damaged, its length is not\n",
           "        return Frames(frames, len(data) - pos, damaged)\n        nxt = None\n",
           EVENTS, "durability"),
    Mutant("events: a record's data CRC is not checked", EV,
           "return end if data_crc == masked_crc(data[pos + 12 : end - 4]) else None",
           "return end", EVENTS, "durability"),
    Mutant("events: a length's CRC is not checked (a damaged length is trusted)", EV,
           "return end if head_crc == masked_crc(data[pos : pos + 8]) else None",
           "return end", EVENTS, "durability"),
    Mutant("trackers: a resume keeps the old event files beside the rebuilt one", TR,
           "            for path in old:\n                os.unlink(path)\n",
           "            pass\n", RESUME, "durability"),
    Mutant("trackers: a resume removes the old files before its history is on disk", TR,
           "            self.file.sync()  # the history is on disk before the files it came "
           "from go\n",
           "", RESUME, "durability"),
    Mutant("trackers: a resume writes no purge for a watching TensorBoard", TR,
           "            self._write(0, session_log=SessionLog(status=SessionLog.START))\n",
           "            pass\n", TRACKERS, "durability"),
    Mutant("trackers: a fresh run keeps the events of its own killed start", TR,
           "                os.unlink(path)  # checkpoint left them, and a fresh run starts over\n",
           "                pass\n", TRACKERS, "durability"),
    Mutant("loop: a run resumed from its step-0 checkpoint is a fresh run to its dashboards",
           LOOP, "resume=cfg.resume, say=warn)", "resume=start > 0, say=warn)", RESUME,
           "durability"),
    Mutant("loop: a refused run leaves its TensorBoard directories", LOOP,
           "    wrote += made\n", "", TRACKERS, "durability"),
    Mutant("trackers: check_log_dir leaves its probe behind", TR,
           'os.rmdir(tempfile.mkdtemp(prefix=".resgrad-probe-", dir=up))',
           'tempfile.mkdtemp(prefix=".resgrad-probe-", dir=up)', NAMES, "durability"),
    # records: what the rebuilt history and the export hold, and the lines said
    Mutant("trackers: a resume rebuilds nothing from the records", TR,
           "        if step < start and missing:\n", "        if False:\n", RESUME, "records"),
    Mutant("trackers: a resume keeps a (tag, step) as often as the old files hold it", TR,
           "                  if v.tag != LAYOUT_TAG and (v.tag, ev.step) not in have]",
           "                  if v.tag != LAYOUT_TAG]", RESUME, "records"),
    Mutant("trackers: a resume carries the old layout beside the new one", TR,
           "                  if v.tag != LAYOUT_TAG and (v.tag, ev.step) not in have]",
           "                  if (v.tag, ev.step) not in have]", RESUME, "records"),
    Mutant("trackers: a resume never says which histograms are missing", TR,
           "    gone = sorted(set(range(0, start, hist_every)) - hist_steps) if hist_every else []",
           "    gone = []", RESUME, "records"),
    Mutant("trackers: a resume says nothing of damage that cost no scalar", TR,
           "    if not damage and not lost:\n", "    if not lost:\n", RESUME, "records"),
    Mutant("trackers: a removed event file is not said", TR,
           '        damage = ["no event file"]\n', "        damage = []\n", RESUME, "records"),
    Mutant("loop: a resume at step 0 does not log the checkpoint's evaluation", LOOP,
           "    if cfg.resume and evaluated:", "    if start and evaluated:", RESUME, "records"),
    Mutant("loop: a resume's damaged TensorBoard history is said on stdout", LOOP,
           "    warn = log if log is not None else (lambda s: bar.write(s, file=sys.stderr))",
           "    warn = say", CLI, "records"),
    Mutant("trackers: an export's wall time counts the step itself", TR,
           "            yield it, t, step_scalars(by_step[it])\n"
           "        t += ms.get(it, 0.0) / 1e3\n",
           "            yield it, t + ms.get(it, 0.0) / 1e3, step_scalars(by_step[it])\n"
           "        t += ms.get(it, 0.0) / 1e3\n", TRACKERS, "records"),
    Mutant("trackers: an export forgets dynamics.bin's damage", TR,
           "    return Exported(run_dir, logdir, len(dyn.steps), n_evals, dyn.damage)",
           "    return Exported(run_dir, logdir, len(dyn.steps), n_evals, None)", CLI, "records"),
    Mutant("lab_cmds: dynamics --export does not say the records' damage", LAB,
           "        if e.damage:  # the records before the damage were written, as a drawing says",
           "        if False:", CLI, "records"),
    Mutant("events: a sound record that is no event is not counted", EV,
           "        junk = sum(e is None for e in parsed)\n", "        junk = 0\n", EVENTS,
           "records"),
    Mutant("events: a torn tail is counted as damage", EV,
           "            return Frames(frames, len(data) - pos, damaged)\n",
           "            return Frames(frames, 0, damaged + [(pos, len(data) - pos)])\n",
           EVENTS, "records"),
    Mutant("trackers: an emptied event file is said to be missing", TR,
           "    if start > 0 and not event_files(logdir):\n", "    if start > 0 and not old:\n",
           RESUME, "records"),
    Mutant("trackers: rebuilt events are timed from the old files' last event", TR,
           "    first = min((e.wall_time for e in old), default=None)",
           "    first = max((e.wall_time for e in old), default=None)", RESUME, "records"),
    Mutant("trackers: a resume's damage line is never said", TR,
           "                    if damage is not None and say is not None:",
           "                    if False:", RESUME, "records"),
    # ordering and bounds of the history
    Mutant("trackers: the rebuilt steps come after the kept ones, out of step order", TR,
           "    history = sorted(kept + rebuilt, key=lambda e: e.step)",
           "    history = kept + rebuilt", RESUME, "ordering"),
    Mutant("trackers: a resume rebuilds the checkpoint's own step too", TR,
           "        if step < start and missing:\n", "        if step <= start and missing:\n",
           RESUME, "bounds"),
    Mutant("trackers: a resume keeps the old events of the checkpoint's step", TR,
           '        if ev.step >= start or not ev.HasField("summary"):',
           '        if ev.step > start or not ev.HasField("summary"):', RESUME, "bounds"),
    # names and layouts
    Mutant("trackers: a run's name is the out-dir's last part as typed ('out/' -> '')", TR,
           "return name if name is not None else os.path.basename(os.path.abspath(out_dir))",
           "return name if name is not None else os.path.basename(out_dir)", NAMES, "names"),
    Mutant("trackers: a run's name is the normalized out-dir's last part ('.' -> '.')", TR,
           "return name if name is not None else os.path.basename(os.path.abspath(out_dir))",
           "return name if name is not None else os.path.basename(os.path.normpath(out_dir))",
           NAMES, "names"),
    Mutant("trackers: the TensorBoard run is the log directory itself (listed as '.')", TR,
           "        return os.path.join(self.tensorboard_dir(out_dir), run_name(out_dir, "
           "self.name))",
           "        return self.tensorboard_dir(out_dir)", NAMES, "names"),
    Mutant("trackers: an experiment cell's run nested under its own name twice", TR,
           "        return dataclasses.replace(self, dir=self.tensorboard_dir(out_dir), name=name,",
           "        return dataclasses.replace(self, dir=os.path.join("
           "self.tensorboard_dir(out_dir), name), name=name,", TRACKERS, "names"),
    Mutant("trackers: wandb and trackio name the run after the out-dir as typed", TR,
           "    name = run_name(out_dir, log.name)\n",
           "    name = log.name or os.path.basename(out_dir)\n", NAMES, "names"),
    Mutant("trackers: the layout loses train/clipped", TR,
           '"learning rate": ["train/lr"], "clipped": ["train/clipped"]}',
           '"learning rate": ["train/lr"]}', NAMES, "names"),
    Mutant("trackers: the layout loses the stream gradient after the last block", TR,
           '        n = n_layer + 1 if q == "stream_grad" else n_layer\n',
           "        n = n_layer\n", NAMES, "names"),
    Mutant("trackers: the layout's loss chart loses the evaluations' train loss", TR,
           '"loss": ["train/loss", *EVAL_TAGS]', '"loss": ["train/loss", "eval/val_loss"]',
           NAMES, "names"),
    Mutant("trackers: a fresh trackio run joins an older run of its name", TR,
           'resume="allow" if resume else "never",', 'resume="allow",', NAMES, "names"),
    Mutant("trackers: a resumed trackio run is a new run", TR,
           'resume="allow" if resume else "never",', 'resume="never",', NAMES, "names"),
    Mutant("trackers: a fresh wandb run takes the id a killed run left", TR,
           "if resume and os.path.exists(id_path):", "if os.path.exists(id_path):", NAMES,
           "names"),
    Mutant("trackers: a resumed wandb run gets a new id", TR,
           "if resume and os.path.exists(id_path):", "if False:", NAMES, "names"),
    # refusals: --force, --log-dir, the dashboard flags, a broken extra
    Mutant("trackers: an export into the run it reads (or a parent) is not refused", TR,
           "        if holds(logdir, src):\n", "        if False:\n", NAMES, "refusal"),
    Mutant("atomic: holds is true only for the directory itself, not its parents", "formats/atomic.py",
           "    return os.path.commonpath([d, p]) == d", "    return d == p", NAMES, "refusal"),
    Mutant("atomic: holds does not resolve links", "formats/atomic.py",
           "    d, p = os.path.realpath(directory), os.path.realpath(path)",
           "    d, p = os.path.abspath(directory), os.path.abspath(path)", NAMES, "refusal"),
    Mutant("trackers: --force replaces a directory of any files", TR,
           "    stray = _stray(logdir)\n", "    stray = None\n", NAMES, "refusal"),
    Mutant("trackers: --force looks at the top of the directory only", TR,
           "            inner = _stray(entry.path)\n", "            inner = None\n", NAMES,
           "refusal"),
    Mutant("trackers: a link named as an event file counts as one", TR,
           'elif not (entry.is_file(follow_symlinks=False) and "tfevents" in entry.name):',
           'elif not (entry.is_file() and "tfevents" in entry.name):', NAMES, "refusal"),
    Mutant("trackers: an export replaces a directory without --force", TR,
           "    if not force:\n        raise ValueError(\n            f\"{logdir!r} already holds",
           "    if False:\n        raise ValueError(\n            f\"{logdir!r} already holds",
           TRACKERS, "refusal"),
    Mutant("hf: export --force replaces the directory of the checkpoint it reads", HF,
           "        if holds(d, src):\n",
           "        if False:\n", CLI, "refusal"),
    Mutant("pretrained: export_checkpoint does not name the checkpoint it reads", PRE,
           "force=force, reads=[path])", "force=force, reads=[])", CLI, "refusal"),
    Mutant("pretrained: export_checkpoint always forces", PRE,
           "force=force, reads=[path])", "force=True, reads=[path])",
           ("tests/train/test_pretrained.py", "tests/cli/test_cli_pretrained.py"), "durability"),
    Mutant("trackers: a fresh run logs into another run's TensorBoard directory", TR,
           "        if history is None and wall_time is None and old:", "        if False:",
           TRACKERS, "refusal"),
    Mutant("trackers: an experiment cell's log directory counts as another run's", TR,
           "                                   project=project, own_dir=True)  # fmt: skip",
           "                                   project=project, own_dir=False)  # fmt: skip",
           TRACKERS, "refusal"),
    Mutant("trackers: a run given a --log-dir takes the directory as its own", TR,
           "                own = log.dir is None or log.own_dir\n", "                own = True\n",
           TRACKERS, "refusal"),
    Mutant("trackers: a run name with '/' is taken (its TensorBoard run lands elsewhere)", TR,
           'if n is not None and (n in ("", ".", "..") or "/" in n or os.sep in n):',
           'if n is not None and n in ("", ".", ".."):', NAMES, "refusal"),
    Mutant("trackers: check_log_dir takes a log dir under a file", TR,
           "    if not os.path.isdir(up):\n        raise NotADirectoryError(f\"--log-dir",
           "    if False:\n        raise NotADirectoryError(f\"--log-dir", NAMES, "refusal"),
    Mutant("trackers: check_log_dir trusts the permission bits", TR,
           'os.rmdir(tempfile.mkdtemp(prefix=".resgrad-probe-", dir=up))',
           "assert os.access(up, os.W_OK)", NAMES, "refusal"),
    Mutant("_common: --log-dir is not checked before the run", COMMON,
           "        check_log_dir(log.dir)", "        pass", CLI, "refusal"),
    Mutant("_common: --project with TensorBoard alone is taken and ignored", COMMON,
           "if not {\"wandb\", \"trackio\"} & set(args.log_to):", "if False:", CLI, "refusal"),
    Mutant("_common: --project is refused without wandb, even with trackio", COMMON,
           "if not {\"wandb\", \"trackio\"} & set(args.log_to):",
           "if \"wandb\" not in args.log_to:", CLI, "refusal"),
    Mutant("_common: --log-dir with wandb or trackio alone is taken and ignored", COMMON,
           "    if \"tensorboard\" not in args.log_to:\n", "    if not args.log_to:\n", CLI,
           "refusal"),
    Mutant("events: an extra that fails to import is called not installed", EV,
           "        if e.name == module:\n", "        if True:\n", EVENTS, "refusal"),
    Mutant("events: only an ImportError of an extra's import is caught", EV,
           "    except Exception as e:  # noqa: BLE001 - whatever its import raised is the reason",
           "    except ImportError as e:", EVENTS, "refusal"),
    Mutant("events: an extra's import error is quoted whole, over several lines", EV,
           '    text = (str(why).strip().splitlines() or [""])[0]', "    text = str(why)",
           EVENTS, "refusal"),
    Mutant("trackers: require looks for the module without importing it", TR,
           '        import_extra(module, f"--log-to {t}", extra)\n',
           "        import importlib.util\n\n        if importlib.util.find_spec(module) is None:\n"
           '            import_extra(module, f"--log-to {t}", extra)\n', CLI, "refusal"),
]  # fmt: skip
