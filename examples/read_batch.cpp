// Read a batch file of `ptojax fuzz --export DIR --export-format batch` from C++
// (C++17, no library): the container is safetensors, the schema docs/fuzzing.md's
// ptojax.fuzz-batch.v2.
//
//   g++ -std=c++17 -O2 -o read_batch examples/read_batch.cpp
//   ./read_batch DIR/batch-0-000000.safetensors
//
// prints the metadata, every tensor's dtype and shape, and per case its number,
// word count, final fault code and executed count; a harness would copy the
// initial.* arrays into its device and compare its results with final.*.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// The header is JSON of a fixed shape: one object of objects (dtype, shape,
// data_offsets) and "__metadata__" (strings). This is just enough JSON for it.
struct Parser {
    const std::string& s;
    size_t i = 0;
    void ws() { while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i; }
    void expect(char c) {
        ws();
        if (i >= s.size() || s[i] != c) throw std::runtime_error(std::string("expected ") + c);
        ++i;
    }
    bool peek(char c) { ws(); return i < s.size() && s[i] == c; }
    std::string str() {
        expect('"');
        std::string out;
        while (i < s.size() && s[i] != '"') {
            if (s[i] == '\\') ++i;          // names and dtypes hold no escapes that matter here
            out += s[i++];
        }
        expect('"');
        return out;
    }
    uint64_t num() {
        ws();
        uint64_t v = 0;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + (s[i++] - '0');
        return v;
    }
    std::vector<uint64_t> nums() {
        std::vector<uint64_t> out;
        expect('[');
        while (!peek(']')) {
            out.push_back(num());
            if (peek(',')) ++i;
        }
        expect(']');
        return out;
    }
};

struct Tensor {
    std::string dtype;
    std::vector<uint64_t> shape;
    uint64_t begin = 0, end = 0;
};

struct Batch {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, std::string> metadata;
    std::vector<char> data;

    template <typename T>
    const T* get(const std::string& name, const char* dtype) const {
        auto it = tensors.find(name);
        if (it == tensors.end() || it->second.dtype != dtype)
            throw std::runtime_error("no " + std::string(dtype) + " tensor " + name);
        return reinterpret_cast<const T*>(data.data() + it->second.begin);   // little-endian host
    }
};

Batch read(const char* path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(std::string("cannot open ") + path);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    if (!f || n < 2 || n > (100u << 20)) throw std::runtime_error("not a safetensors file");
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    Batch b;
    Parser p{header};
    p.expect('{');
    while (!p.peek('}')) {
        std::string name = p.str();
        p.expect(':');
        p.expect('{');
        Tensor t;
        while (!p.peek('}')) {
            std::string key = p.str();
            p.expect(':');
            if (name == "__metadata__") {
                b.metadata[key] = p.str();
            } else if (key == "dtype") {
                t.dtype = p.str();
            } else if (key == "shape") {
                t.shape = p.nums();
            } else if (key == "data_offsets") {
                auto o = p.nums();
                t.begin = o.at(0);
                t.end = o.at(1);
            }
            if (p.peek(',')) ++p.i;
        }
        p.expect('}');
        if (name != "__metadata__") b.tensors[name] = t;
        if (p.peek(',')) ++p.i;
    }
    uint64_t size = 0;
    for (auto& kv : b.tensors) size = std::max(size, kv.second.end);
    b.data.resize(size);
    f.read(b.data.data(), static_cast<std::streamsize>(size));
    if (!f) throw std::runtime_error("truncated");
    return b;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: read_batch FILE.safetensors\n";
        return 2;
    }
    try {
        Batch b = read(argv[1]);
        std::cout << "format " << b.metadata["format"] << "\n";
        for (auto& kv : b.tensors) {
            std::cout << "  " << kv.first << " " << kv.second.dtype << " [";
            for (size_t d = 0; d < kv.second.shape.size(); ++d)
                std::cout << (d ? "," : "") << kv.second.shape[d];
            std::cout << "]\n";
        }
        uint64_t cases = b.tensors.at("case.k").shape.at(0);
        const int64_t* k = b.get<int64_t>("case.k", "I64");
        const int32_t* lengths = b.get<int32_t>("lengths", "I32");
        const int32_t* fault = b.get<int32_t>("final.fault", "I32");
        const int64_t* executed = b.get<int64_t>("final.executed", "I64");
        for (uint64_t r = 0; r < cases && r < 8; ++r)
            std::cout << "case " << k[r] << ": " << lengths[r] << " words, fault " << fault[r]
                      << ", executed " << executed[r] << "\n";
        std::cout << cases << " cases\n";
    } catch (const std::exception& e) {
        std::cerr << "read_batch: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
