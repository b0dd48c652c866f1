"""Answers to SlurmLocalQueue.read_queue's one SSH command, for tests that stand in for ssh.

reply(jobs) answers as `squeue --json` does (Slurm 22.05 shape: plain numbers, job_state a
string); reply(plain=rows) as a Slurm without --json, through the squeue -o fallback, with the
record mark and field separator read back from the command (as squeue would print them).
"""
import json
import re
import shlex


def job(jid, name="user-job", partition="cloud-small", state="PENDING", reason="Priority", comment=None,
        submit=1_767_225_600, start=0, cpus=1, qos="normal", account="research"):
    """One job as `squeue --json` of Slurm 22.05 prints it (the fields the backend reads)."""
    return {"job_id": jid, "name": name, "partition": partition, "job_state": state, "state_reason": reason,
            "comment": comment, "submit_time": submit, "start_time": start, "cpus": cpus, "qos": qos,
            "account": account, "user_name": "ana"}


def marks(script):
    """(record mark, field separator, end mark) of a read_queue command."""
    end = re.search(r"echo '(--- ovf-[0-9a-f]+)' \$\?", script).group(1)
    fmt = shlex.split(re.search(r"squeue -h -a -t all -o ('[^']*')", script).group(1))[0]
    mark = re.match(r"(ovf-[0-9a-f]+)", fmt).group(1)
    sep = re.search(r"(\|ovf-[0-9a-f]+\|)", fmt).group(1)
    return mark, sep, end


def reply(jobs=None, plain=None, sprio="", raw=None):
    """A function of the ssh argv answering read_queue: squeue --json of `jobs`, or (plain: lists of
    field texts in PLAIN_FIELDS order) the squeue -o fallback; `raw` replaces the squeue output."""
    def answer(cmd):
        script = cmd[-1]
        mark, sep, end = marks(script)
        if raw is not None:
            out = raw
        elif plain is None:
            out = json.dumps({"meta": {}, "errors": [], "jobs": jobs or []}, indent=2)
        else:
            out = mark + "-plain\n" + "".join(mark + sep.join(row) + "\n" for row in plain)
        return "%s\n%s 0\n%s" % (out, end, sprio)
    return answer


class FakeSlurm(object):
    """A Slurm controller behind ssh that prints what the command asks for, as squeue would: `--json`
    (unless json=False: a Slurm built without it exits 1), `-o` formats (%A %T %r %V %S %C %P %q %a
    %k %j) and `-O` field lists with their suffixes, each job's values as they are, names and comments
    included. Every other command (sprio, scontrol) prints nothing. Use as Recorder(FakeSlurm(jobs))."""

    CODES = {"A": "job_id", "i": "job_id", "T": "job_state", "r": "state_reason", "V": "submit", "S": "start",
             "C": "cpus", "P": "partition", "q": "qos", "a": "account", "k": "comment", "j": "name",
             "l": "time_limit_text", "m": "memory_text", "b": "tres_per_node", "Z": "current_working_directory",
             "o": "command"}
    LONG = {"JOBID": "job_id", "NAME": "name", "STATE": "job_state", "REASON": "state_reason",
            "SUBMITTIME": "submit", "STARTTIME": "start", "COMMENT": "comment", "NUMCPUS": "cpus",
            "PARTITION": "partition", "QOS": "qos", "ACCOUNT": "account"}
    HEAD = {"SUBMITTIME": "SUBMIT_TIME", "STARTTIME": "START_TIME", "NUMCPUS": "CPUS"}

    def __init__(self, jobs, json_ok=True):
        self.jobs = jobs
        self.json_ok = json_ok
        self.squeue_calls = []

    def _text(self, job, key):
        if key == "time_limit_text":
            return "%d:00" % job["time_limit"] if job.get("time_limit") else "UNLIMITED"
        if key == "memory_text":
            return "%dM" % job["memory_per_node"] if job.get("memory_per_node") else "0"
        if key == "submit":
            return "2026-01-01T00:00:00"
        if key == "start":
            return "N/A"
        value = job.get(key)
        return "(null)" if value is None else str(value)

    def _squeue(self, args):
        self.squeue_calls.append(args)
        if "--json" in args:
            if not self.json_ok:
                return None, 1
            return json.dumps({"meta": {}, "errors": [], "jobs": self.jobs}, indent=2) + "\n", 0
        if "-o" in args:
            fmt = args[args.index("-o") + 1]
            only = args[args.index("-j") + 1] if "-j" in args else None
            lines = [re.sub(r"%([A-Za-z])", lambda m: self._text(j, self.CODES[m.group(1)]), fmt) for j in self.jobs
                     if only is None or str(j["job_id"]) == only]
            return "".join(line + "\n" for line in lines), 0
        if "-O" in args:
            fields = [f.partition(":") for f in args[args.index("-O") + 1].split(",")]
            head = "".join(self.HEAD.get(n.upper(), n.upper()) + suffix for n, dummy, suffix in fields)
            rows = ["".join(self._text(j, self.LONG[n.upper()]) + suffix for n, dummy, suffix in fields)
                    for j in self.jobs]
            return "\n".join([head] + rows) + "\n", 0
        return "", 0

    def _job(self, sid):
        return next((j for j in self.jobs if str(j["job_id"]) == sid), None)

    def _scontrol_show(self, args):
        """`scontrol show job --json ID` (22.05 shape) or `-o ID`: one line, keys in Slurm's order,
        TresPerNode only when the job has one, values as they are."""
        job = self._job(args[-1])
        if job is None:
            return "", 1
        if "--json" in args:
            if not self.json_ok:
                return None, 1
            return json.dumps({"meta": {}, "errors": [], "jobs": [job]}) + "\n", 0
        words = ["JobId=%s" % job["job_id"], "JobName=%s" % job.get("name"), "UserId=ana(1001)",
                 "JobState=%s" % job.get("job_state"), "Partition=%s" % job.get("partition"),
                 "TimeLimit=%s" % self._text(job, "time_limit_text"), "NumCPUs=%s" % job.get("cpus"),
                 "ReqTRES=%s" % (job.get("tres_req_str") or "cpu=1,node=1")]
        if job.get("tres_per_node"):
            words.append("TresPerNode=%s" % job["tres_per_node"])
        words += ["Command=%s" % job.get("command"), "WorkDir=%s" % job.get("current_working_directory")]
        return " ".join(words) + "\n", 0

    def __call__(self, cmd):
        """stdout of the shell script cmd[-1]: commands joined by ;, || and { }, echo with $?."""
        lex = shlex.shlex(cmd[-1], posix=True, punctuation_chars=";|{}")
        lex.whitespace_split = True
        tokens = []
        for tok in lex:
            tokens += re.findall(r"\|\||[;{}|]", tok) if re.fullmatch(r"[;{}|]+", tok) else [tok]
        self._tokens, self._out, self._rc = tokens, [], 0
        self._list(run=True)
        return "".join(self._out)

    def _list(self, run):
        self._pipeline(run)
        while self._tokens and self._tokens[0] == ";":
            self._tokens.pop(0)
            if not self._tokens or self._tokens[0] == "}":
                break
            self._pipeline(run)

    def _pipeline(self, run):
        self._item(run)
        while self._tokens and self._tokens[0] == "||":
            self._tokens.pop(0)
            self._item(run and self._rc != 0)

    def _item(self, run):
        if self._tokens[0] == "{":
            self._tokens.pop(0)
            self._list(run)
            self._tokens.pop(0)          # }
            return
        words = []
        while self._tokens and self._tokens[0] not in (";", "||", "}", "{"):
            words.append(self._tokens.pop(0))
        if not run:
            return
        words = [w for w in words if w not in ("2>/dev/null", "2>", "/dev/null")]
        if words[0] == "echo":
            self._out.append(" ".join(str(self._rc) if w == "$?" else w for w in words[1:]) + "\n")
            self._rc = 0
        elif words[0] == "squeue":
            text, self._rc = self._squeue(words[1:])
            self._out.append(text or "")
        elif words[0] == "scontrol" and [w for w in words if w != "--json"][1:3] == ["show", "job"]:
            text, self._rc = self._scontrol_show(words[1:])
            self._out.append(text or "")
        elif words[:3] == ["scontrol", "write", "batch_script"]:
            job = self._job(words[3])
            self._out.append(job.get("script", "") if job else "")
            self._rc = 0 if job else 1
        else:
            self._rc = 0
