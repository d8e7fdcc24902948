#include "tools/launch/worker_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace lockstep {
namespace launch {
namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A binary (ELF) or a script with an interpreter line: meant to run directly.
bool LooksExecutable(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {0, 0, 0, 0};
  in.read(head, sizeof(head));
  return (head[0] == '#' && head[1] == '!') || (head[0] == 0x7f && head[1] == 'E' && head[2] == 'L' && head[3] == 'F');
}

absl::StatusOr<std::string> Python(const GetEnvFn& getenv) {
  std::optional<std::string> chosen = getenv("LOCKSTEP_PYTHON");
  const std::string path = getenv("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  absl::StatusOr<std::string> python = FindOnPath(chosen.value_or("python3"), path);
  if (!python.ok()) {
    return absl::NotFoundError(
        absl::StrCat("lockstep-run: no Python interpreter to run the training script (", python.status().message(),
                     "); install python3, set LOCKSTEP_PYTHON=/path/to/python, or give --no_python for an executable"));
  }
  return python;
}

}  // namespace

absl::StatusOr<std::string> FindOnPath(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) {
    if (!IsRegularFile(name)) return absl::NotFoundError(absl::StrCat("'", name, "' does not exist"));
    return name;
  }
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (IsRegularFile(candidate) && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("'", name, "' is not found on PATH (", path, ")"));
}

absl::StatusOr<std::vector<std::string>> WorkerCommand(const LaunchFlags& flags, const GetEnvFn& getenv) {
  const std::string path = getenv("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  std::vector<std::string> argv;
  auto with_python = [&](const std::vector<std::string>& head) -> absl::StatusOr<std::vector<std::string>> {
    LOCKSTEP_ASSIGN_OR_RETURN(std::string python, Python(getenv));
    std::vector<std::string> v = {python, "-u"};
    v.insert(v.end(), head.begin(), head.end());
    v.insert(v.end(), flags.program_args.begin(), flags.program_args.end());
    return v;
  };
  if (flags.module && !flags.no_python) return with_python({"-m", flags.program});
  const bool python_script = !flags.no_python && (flags.run_path || absl::EndsWith(flags.program, ".py"));
  if (python_script) {
    if (!IsRegularFile(flags.program)) {
      return absl::NotFoundError(absl::StrCat("lockstep-run: the training script '", flags.program,
                                              "' does not exist; give its path (relative to ", "this directory)"));
    }
    return with_python({flags.program});
  }
  absl::StatusOr<std::string> found = FindOnPath(flags.program, path);
  if (!found.ok()) {
    return absl::NotFoundError(absl::StrCat("lockstep-run: the worker program ", found.status().message(),
                                            "; give a path to an executable (or a .py script)"));
  }
  if (::access(found->c_str(), X_OK) != 0) {
    if (!flags.no_python && !LooksExecutable(*found)) return with_python({*found});
    return absl::PermissionDeniedError(absl::StrCat("lockstep-run: the worker program '", *found,
                                                    "' is not executable; chmod +x it, or run it with its "
                                                    "interpreter"));
  }
  argv.push_back(*found);
  argv.insert(argv.end(), flags.program_args.begin(), flags.program_args.end());
  return argv;
}

}  // namespace launch
}  // namespace lockstep
