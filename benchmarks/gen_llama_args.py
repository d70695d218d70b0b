"""Writes moetools/devicefit/llama_args.py's table of llama.cpp's command-line flags (every spelling
add_opt(common_arg(...)) declares in common/arg.cpp, with how many values each takes: 0 for a
handler of (params) or (params, bool), 1 for (params, int|string), 2 for (params, string, string);
see common/arg.h's common_arg constructors and common_params_parse_ex, which reads the values).

    python benchmarks/gen_llama_args.py /path/to/llama.cpp/common/arg.cpp > /tmp/table.txt
"""

import re
import sys


def flags(source):
    table = {}
    for match in re.finditer(r"add_opt\(common_arg\(", source):
        handler = source.find("[](", match.end())
        head = source[match.end():handler]
        signature = source[handler:source.find("{", handler)]
        values = signature.split(")")[0].split(",")[1:]  # the handler's parameters after common_params &
        arity = 0 if not values or "bool" in values[0] else len(values)
        for group in re.findall(r"\{([^{}]*)\}", head):
            for name in re.findall(r'"(-[^"]*)"', group):
                table[name] = arity
    return table


def main():
    table = flags(open(sys.argv[1]).read())
    for arity in (0, 1, 2):
        names = sorted(name for name, value in table.items() if value == arity)
        print(f"ARITY_{arity} = " + repr(" ".join(names)))


if __name__ == "__main__":
    main()
