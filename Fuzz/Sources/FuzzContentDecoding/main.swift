// Content decoding: byte 0 picks the codings, byte 1 how the body is cut into pieces, and the rest
// is the coded body. It is decoded twice, whole and in pieces, under small limits. Only
// ContentDecodingError may come out (the typed throws make that so at compile time); nothing may
// trap or hang; no more than the limit may be counted or handed out, never in chunks over
// outputChunkBytes; an error repeats on every later call; and when neither run hit a limit,
// both succeed with the same bytes or both fail. Brotli pushes decoded bytes out early when it runs out of input and
// holds them when it does not, so how a body is cut changes how much comes out before an error,
// and with stacked codings which stage sees the damage first: failed runs are compared by the
// kind of their error (not libbrotli's message, which depends on the cuts too) only when there
// is one coding.
import CourierPolicies

/// The codings byte 0 selects (modulo the count), in the order they were applied. `deflate`
/// covers both zlib-wrapped and raw data: the decoder tells them apart itself.
let codingChoices: [[ContentCoding]] = [
    [.gzip], [.deflate], [.brotli],
    [.gzip, .brotli], [.deflate, .gzip], [.brotli, .deflate], [.gzip, .gzip],
    [],
]

/// Small limits so a bomb costs little: 8 MiB at most, the default ratio.
let limits = ContentDecodingLimits(maximumDecodedBytes: 8 << 20)

/// What one run produced: a fingerprint of the output, not the output itself.
struct Outcome: Equatable {
    var decodedBytes = 0
    /// FNV-1a over the decoded bytes.
    var fingerprint: UInt64 = 0xCBF2_9CE4_8422_2325
    var error: ContentDecodingError?

    /// True when a limit stopped the run; such runs depend on how the input was cut (the ratio is
    /// of the bytes fed so far), so they are not compared.
    var hitLimit: Bool {
        switch error {
        case .decodedSizeExceeded?, .ratioExceeded?: return true
        default: return false
        }
    }
}

/// The piece sizes byte 1 picks: random sizes from 1 to 2^(seed % 13) (1 byte to 4 KiB), from a
/// SplitMix64 generator seeded with it.
struct PieceSizes {
    var state: UInt64
    let largest: UInt64

    init(seed: UInt8) {
        state = UInt64(seed)
        largest = 1 << (UInt64(seed) % 13)
    }

    mutating func next() -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % largest) + 1
    }
}

/// Decodes `body` with a fresh decoder, in pieces from `pieces` (or whole when nil), checking the
/// invariants as it goes.
func run(_ body: UnsafeRawBufferPointer, codings: [ContentCoding], pieces: PieceSizes?) -> Outcome {
    let decoder = ContentDecoder(codings: codings, limits: limits)
    var outcome = Outcome()
    let collect = { (chunk: UnsafeRawBufferPointer) in
        precondition(chunk.count <= ContentDecoder.outputChunkBytes, "a chunk over outputChunkBytes")
        precondition(!chunk.isEmpty, "an empty chunk")
        outcome.decodedBytes += chunk.count
        for byte in chunk {
            outcome.fingerprint = (outcome.fingerprint ^ UInt64(byte)) &* 0x100_0000_01B3
        }
    }
    var pieces = pieces
    /// Where the next piece starts; every byte before it was fed.
    var offset = 0
    do throws(ContentDecodingError) {
        while offset < body.count {
            var end = body.count
            if var sizes = pieces {
                end = min(offset + sizes.next(), body.count)
                pieces = sizes
            }
            let piece = UnsafeRawBufferPointer(rebasing: body[offset..<end])
            offset = end
            try decoder.decode(piece, output: collect)
            precondition(decoder.decodedByteCount <= limits.maximumDecodedBytes, "decoded past the limit")
        }
        try decoder.finish(output: collect)
    } catch {
        outcome.error = error
        // The error sticks: another piece or another finish throws it again and hands out nothing.
        let rest = UnsafeRawBufferPointer(rebasing: body[offset...])
        do throws(ContentDecodingError) {
            try decoder.decode(rest) { _ in preconditionFailure("output after an error") }
            preconditionFailure("decode after an error did not throw")
        } catch let again {
            precondition(again == error, "a different error after the first")
        }
        do throws(ContentDecodingError) {
            try decoder.finish { _ in preconditionFailure("output after an error") }
            preconditionFailure("finish after an error did not throw")
        } catch let again {
            precondition(again == error, "a different error after the first")
        }
    }
    precondition(decoder.decodedByteCount <= limits.maximumDecodedBytes, "decoded past the limit")
    precondition(decoder.decodedByteCount == Int64(outcome.decodedBytes), "decodedByteCount disagrees with the output")
    precondition(decoder.encodedByteCount == Int64(offset), "encodedByteCount disagrees with the input")
    return outcome
}

/// An error without its library message: what a caller can act on.
func kind(_ error: ContentDecodingError?) -> String {
    switch error {
    case nil: return "none"
    case .corrupt(let coding, _)?: return "corrupt \(coding)"
    case .truncated(let coding)?: return "truncated \(coding)"
    case .decodedSizeExceeded?: return "size"
    case .ratioExceeded?: return "ratio"
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzContentDecoding(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let codings = codingChoices[Int(data[0]) % codingChoices.count]
    let body = UnsafeRawBufferPointer(start: data + 2, count: size - 2)
    let whole = run(body, codings: codings, pieces: nil)
    let split = run(body, codings: codings, pieces: PieceSizes(seed: data[1]))
    if !whole.hitLimit && !split.hitLimit {
        precondition((whole.error == nil) == (split.error == nil), "one feeding failed, the other did not")
        if whole.error == nil || codings.count == 1 {
            // The kind of failure must agree; libbrotli's detail can differ with the cuts
            // (BLOCK_LENGTH_1 fed byte by byte, BLOCK_LENGTH_2 whole).
            precondition(kind(whole.error) == kind(split.error), "whole and split feeding fail differently")
        }
        if whole.error == nil {
            precondition(whole == split, "whole and split feeding decode differently")
        }
    }
    return 0
}
