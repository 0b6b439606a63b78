#!/bin/bash
# No shell, ever, in the library, the command, the tools or the Python package: their text is never a
# command line that a quote in a path could break out of. Usage: check_no_shell.sh ROOT. Comments are
# left out; exit 1 naming each call or shell name found.
set -euo pipefail
root=$(cd "$1" && pwd)
c_folders=(runtime cli harness bench tuning)
python_folders=(bindings/python/volt8)

# Prints "path:line: what: text" for each finding in the files named on stdin (NUL-separated);
# LANGUAGE c strips /* */ and // comments, python # comments, keeping line numbers.
scan() {
  LANGUAGE=$1 ROOT=$root perl -0 -ne '
    BEGIN {
      # system/popen/wordexp run /bin/sh; exec*/posix_spawn* start a program, which these never do,
      # so none of them can start a shell either.
      $c_calls = qr/\b(system|popen|wordexp|execl|execle|execlp|execv|execve|execvp|execvpe|fexecve|posix_spawnp?)\s*\(/;
      $python_calls = qr/\bos\.(system|popen|spawn[a-z]*)\s*\(|\bshell\s*=\s*True|\b(getoutput|getstatusoutput|create_subprocess_shell)\s*\(|\bpty\.spawn|\bcommands\./;
      $shell_name = qr{["\x27](/usr)?(/bin/)?(ba|da|z|k|c|tc)?sh["\x27]};
    }
    chomp(my $path = $_);
    open(my $in, "<", $path) or die "$path: $!\n";
    my $text = do { local $/; <$in> };
    close $in;
    if ($ENV{LANGUAGE} eq "c") {
      $text =~ s{/\*(.*?)\*/}{"\n" x ($1 =~ tr/\n//)}gse;
      $text =~ s{//[^\n]*}{}g;
    } else {
      $text =~ s/^[ \t]*#[^\n]*//mg;
      $text =~ s/[ \t]+#[^"\x27\n]*$//mg;
    }
    my $calls = $ENV{LANGUAGE} eq "c" ? $c_calls : $python_calls;
    (my $shown = $path) =~ s{^\Q$ENV{ROOT}\E/}{};
    my $line = 0;
    for (split /\n/, $text, -1) {
      $line++;
      (my $code = $_) =~ s/^\s+//;
      print "$shown:$line: runs a shell or starts a program: $code\n" if /$calls/;
      print "$shown:$line: names a shell: $code\n" if /$shell_name/;
    }'
}

findings=$(
  for folder in "${c_folders[@]}"; do
    if [ -d "$root/$folder" ]; then find "$root/$folder" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print0; fi
  done | scan c
  for folder in "${python_folders[@]}"; do
    if [ -d "$root/$folder" ]; then find "$root/$folder" -type f -name '*.py' -print0; fi
  done | scan python
)
if [ -n "$findings" ]; then
  echo "$findings"
  echo "check_no_shell: $(wc -l <<<"$findings") shell use(s) in ${c_folders[*]} ${python_folders[*]}"
  exit 1
fi
echo "check_no_shell: no shell in ${c_folders[*]} ${python_folders[*]}"
