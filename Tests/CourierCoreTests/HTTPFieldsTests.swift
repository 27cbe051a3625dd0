import CourierCore
import Testing

private typealias Field = HTTPFields.Field

/// "name: value" for every field, in order, from the raw bytes `forEachField` lends.
private func rawLines(_ fields: HTTPFields) -> [String] {
    var lines: [String] = []
    fields.forEachField { name, value in
        lines.append(String(decoding: name, as: UTF8.self) + ": " + String(decoding: value, as: UTF8.self))
    }
    return lines
}

@Suite("HTTPFields")
struct HTTPFieldsTests {
    // MARK: Building

    @Test("an empty list has no fields")
    func empty() {
        let fields = HTTPFields()
        #expect(fields.isEmpty)
        #expect(fields.count == 0)
        #expect(fields.fields == [])
        #expect(fields.first("Host") == nil)
        #expect(fields.values("Host") == [])
        #expect(fields.combined("Host") == nil)
        #expect(!fields.contains("Host"))
        #expect(rawLines(fields) == [])
    }

    @Test("fields from pairs keep their order and the case of their names")
    func orderAndCaseKept() {
        let fields = HTTPFields([("Zeta", "1"), ("alpha", "2"), ("MIDDLE", "3")])
        #expect(fields.count == 3)
        #expect(fields.fields == [Field(name: "Zeta", value: "1"), Field(name: "alpha", value: "2"), Field(name: "MIDDLE", value: "3")])
        #expect(fields.name(at: 0) == "Zeta")
        #expect(fields.name(at: 1) == "alpha")
        #expect(fields.name(at: 2) == "MIDDLE")
        #expect(fields.value(at: 2) == "3")
        #expect(fields[1] == Field(name: "alpha", value: "2"))
    }

    @Test("a dictionary literal keeps the order it was written in")
    func dictionaryLiteral() {
        let fields: HTTPFields = ["B": "2", "A": "1", "C": "3"]
        #expect(fields.fields.map(\.name) == ["B", "A", "C"])
    }

    @Test("append adds at the end")
    func appendAddsAtEnd() {
        var fields = HTTPFields([("A", "1")])
        fields.append(name: "B", value: "2")
        fields.append(name: "a", value: "3")
        #expect(fields.fields == [Field(name: "A", value: "1"), Field(name: "B", value: "2"), Field(name: "a", value: "3")])
    }

    @Test("empty values and UTF-8 values are kept as given")
    func emptyAndUTF8Values() {
        let fields = HTTPFields([("X-Empty", ""), ("X-Text", "naïve café ☕︎")])
        #expect(fields.first("x-empty") == "")
        #expect(fields.contains("X-Empty"))
        #expect(fields.first("x-text") == "naïve café ☕︎")
        #expect(rawLines(fields) == ["X-Empty: ", "X-Text: naïve café ☕︎"])
    }

    @Test("description lists the fields one per line")
    func description() {
        let fields = HTTPFields([("A", "1"), ("B", "2")])
        #expect(fields.description == "A: 1\nB: 2")
        #expect(Field(name: "A", value: "1").description == "A: 1")
    }

    // MARK: Lookup

    @Test("lookup ignores the case of names", arguments: ["Content-Type", "content-type", "CONTENT-TYPE", "cOnTeNt-TyPe"])
    func caseInsensitiveLookup(_ name: String) {
        let fields = HTTPFields([("Accept", "*/*"), ("Content-Type", "text/html")])
        #expect(fields.first(name) == "text/html")
        #expect(fields.contains(name))
        #expect(fields.firstIndex(of: name) == 1)
        #expect(fields.values(name) == ["text/html"])
        #expect(fields.name(at: 1, is: name))
    }

    @Test("lookup matches whole names only")
    func wholeNamesOnly() {
        let fields = HTTPFields([("Content-Type", "text/html")])
        #expect(fields.first("Content") == nil)
        #expect(fields.first("Content-Type-X") == nil)
        #expect(fields.first("Content-Typ") == nil)
        #expect(fields.first("") == nil)
        #expect(!fields.name(at: 0, is: "Content-Length"))
    }

    @Test("case folding is ASCII letters only: '@' is not '`', '[' is not '{'")
    func asciiLettersOnlyFold() {
        let fields = HTTPFields([("X@", "1"), ("Y[", "2"), ("Z_", "3")])
        #expect(fields.first("x`") == nil)
        #expect(fields.first("y{") == nil)
        #expect(fields.first("X@") == "1")
        #expect(fields.first("y[") == "2")
        #expect(fields.first("z_") == "3")
        #expect(fields.first("Z-") == nil)
    }

    @Test("duplicates are all kept, and first() returns the earliest")
    func duplicates() {
        let fields = HTTPFields([("Set-Cookie", "a=1"), ("X", "x"), ("set-cookie", "b=2"), ("SET-COOKIE", "c=3")])
        #expect(fields.count == 4)
        #expect(fields.first("Set-Cookie") == "a=1")
        #expect(fields.values("set-cookie") == ["a=1", "b=2", "c=3"])
        #expect(fields.firstIndex(of: "SET-cookie") == 0)
    }

    @Test("combined() joins repeated values with a comma and a space")
    func combined() {
        let fields = HTTPFields([("Accept", "text/html"), ("Other", "o"), ("accept", "application/json"), ("ACCEPT", "*/*")])
        #expect(fields.combined("Accept") == "text/html, application/json, */*")
        #expect(fields.combined("other") == "o")
        #expect(fields.combined("Missing") == nil)
    }

    // MARK: Changing

    @Test("removeAll(named:) removes every field of that name, in any case, and keeps the rest in order")
    func removeAll() {
        var fields = HTTPFields([("A", "1"), ("Cookie", "x"), ("B", "2"), ("COOKIE", "y"), ("C", "3")])
        fields.removeAll(named: "cookie")
        #expect(fields.fields == [Field(name: "A", value: "1"), Field(name: "B", value: "2"), Field(name: "C", value: "3")])
        #expect(!fields.contains("Cookie"))
        #expect(rawLines(fields) == ["A: 1", "B: 2", "C: 3"])
    }

    @Test("removeAll(named:) of an absent name changes nothing")
    func removeAbsent() {
        var fields = HTTPFields([("A", "1")])
        fields.removeAll(named: "B")
        #expect(fields == HTTPFields([("A", "1")]))
    }

    @Test("set() replaces every field of that name with one, at the first one's place")
    func setReplacesInPlace() {
        var fields = HTTPFields([("Accept", "a"), ("Cookie", "1"), ("X", "x"), ("cookie", "2"), ("Y", "y")])
        fields.set(name: "Cookie", value: "3")
        #expect(fields.fields == [
            Field(name: "Accept", value: "a"), Field(name: "Cookie", value: "3"),
            Field(name: "X", value: "x"), Field(name: "Y", value: "y"),
        ])
        #expect(fields.values("cookie") == ["3"])
        #expect(rawLines(fields) == ["Accept: a", "Cookie: 3", "X: x", "Y: y"])
    }

    @Test("set() with a name in another case still replaces in place")
    func setOtherCase() {
        var fields = HTTPFields([("A", "1"), ("Content-Type", "text/plain"), ("B", "2")])
        fields.set(name: "content-type", value: "text/html")
        #expect(fields.count == 3)
        #expect(fields.firstIndex(of: "Content-Type") == 1)
        #expect(fields.value(at: 1) == "text/html")
        #expect(fields.name(at: 1, is: "CONTENT-TYPE"))
        #expect(fields.value(at: 2) == "2")
    }

    @Test("set() of the first field keeps it first")
    func setFirstField() {
        var fields = HTTPFields([("Host", "a"), ("B", "2"), ("host", "c")])
        fields.set(name: "Host", value: "z")
        #expect(fields.fields == [Field(name: "Host", value: "z"), Field(name: "B", value: "2")])
    }

    @Test("set() of an absent name appends")
    func setAbsentAppends() {
        var fields = HTTPFields([("A", "1")])
        fields.set(name: "B", value: "2")
        #expect(fields.fields == [Field(name: "A", value: "1"), Field(name: "B", value: "2")])
    }

    @Test("set() with nil removes every field of that name")
    func setNilRemoves() {
        var fields = HTTPFields([("A", "1"), ("B", "2"), ("a", "3")])
        fields.set(name: "A", value: nil)
        #expect(fields.fields == [Field(name: "B", value: "2")])
        fields.set(name: "Missing", value: nil)
        #expect(fields.fields == [Field(name: "B", value: "2")])
    }

    @Test("a copy is independent of the original")
    func valueSemantics() {
        let original = HTTPFields([("A", "1")])
        var copy = original
        copy.append(name: "B", value: "2")
        copy.set(name: "A", value: "changed")
        #expect(original.fields == [Field(name: "A", value: "1")])
        #expect(copy.fields == [Field(name: "A", value: "changed"), Field(name: "B", value: "2")])
    }

    // MARK: Equality

    @Test("lists with the same fields in the same order are equal, whatever their storage")
    func equalityIgnoresStorage() {
        var edited = HTTPFields([("X-Gone", "1"), ("A", "1"), ("B", "old")])
        edited.removeAll(named: "x-gone")
        edited.set(name: "B", value: "2")
        let fresh = HTTPFields([("A", "1"), ("B", "2")])
        #expect(edited == fresh)
        #expect(HTTPFields() == HTTPFields([]))
    }

    @Test("order, values, count and the split between name and value all count for equality")
    func inequality() {
        let base = HTTPFields([("A", "1"), ("B", "2")])
        #expect(base != HTTPFields([("B", "2"), ("A", "1")]))
        #expect(base != HTTPFields([("A", "1"), ("B", "3")]))
        #expect(base != HTTPFields([("A", "1")]))
        #expect(base != HTTPFields([("A", "1"), ("B", "2"), ("C", "3")]))
        // The same bytes, split differently.
        #expect(HTTPFields([("AB", "C")]) != HTTPFields([("A", "BC")]))
    }

    // MARK: Raw access

    @Test("forEachField lends each field's name and value bytes, in order")
    func forEachFieldBytes() {
        let fields = HTTPFields([("Host", "example.com"), ("X-Empty", ""), ("X-Two", "a, b")])
        var names: [[UInt8]] = []
        var values: [[UInt8]] = []
        fields.forEachField { name, value in
            names.append(Array(name))
            values.append(Array(value))
        }
        #expect(names == [Array("Host".utf8), Array("X-Empty".utf8), Array("X-Two".utf8)])
        #expect(values == [Array("example.com".utf8), [], Array("a, b".utf8)])
    }

    @Test("forEachField stops at and rethrows the body's error")
    func forEachFieldRethrows() {
        struct Stop: Error {}
        let fields = HTTPFields([("A", "1"), ("B", "2"), ("C", "3")])
        var visited = 0
        #expect(throws: Stop.self) {
            try fields.forEachField { name, _ in
                visited += 1
                if Array(name) == Array("B".utf8) { throw Stop() }
            }
        }
        #expect(visited == 2)
    }

    // MARK: Adopted parser storage

    /// A header section as a parser would hold it, with the offsets of each name and value.
    private static let section = Array("Content-Type: text/html\r\nX-Trace: abc\r\nx-trace: def\r\n".utf8)
    private static let sectionLocations = [
        HTTPFields.Location(name: 0..<12, value: 14..<23),
        HTTPFields.Location(name: 25..<32, value: 34..<37),
        HTTPFields.Location(name: 39..<46, value: 48..<51),
    ]

    @Test("the offsets used below point where they should")
    func sectionOffsetsAreRight() {
        let section = Self.section
        #expect(section.count == 53)
        #expect(String(decoding: section[0..<12], as: UTF8.self) == "Content-Type")
        #expect(String(decoding: section[14..<23], as: UTF8.self) == "text/html")
        #expect(String(decoding: section[25..<32], as: UTF8.self) == "X-Trace")
        #expect(String(decoding: section[34..<37], as: UTF8.self) == "abc")
        #expect(String(decoding: section[39..<46], as: UTF8.self) == "x-trace")
        #expect(String(decoding: section[48..<51], as: UTF8.self) == "def")
    }

    @Test("init(validatedStorage:locations:) reads names and values at the given offsets")
    func validatedStorage() {
        let fields = HTTPFields(validatedStorage: Self.section, locations: Self.sectionLocations)
        #expect(fields.count == 3)
        #expect(fields.first("content-type") == "text/html")
        #expect(fields.values("X-TRACE") == ["abc", "def"])
        #expect(fields.combined("x-trace") == "abc, def")
        #expect(fields.name(at: 2) == "x-trace")
        #expect(fields.value(at: 1) == "abc")
        #expect(rawLines(fields) == ["Content-Type: text/html", "X-Trace: abc", "x-trace: def"])
        #expect(fields == HTTPFields([("Content-Type", "text/html"), ("X-Trace", "abc"), ("x-trace", "def")]))
    }

    @Test("Location reports the ranges it was made with")
    func locationRanges() {
        let location = HTTPFields.Location(name: 3..<7, value: 9..<20)
        #expect(location.name == 3..<7)
        #expect(location.value == 9..<20)
        #expect(location == HTTPFields.Location(name: 3..<7, value: 9..<20))
        #expect(location != HTTPFields.Location(name: 3..<7, value: 9..<21))
    }

    @Test("adopted storage can be changed like any other list")
    func validatedStorageEditable() {
        var fields = HTTPFields(validatedStorage: Self.section, locations: Self.sectionLocations)
        fields.append(name: "Added", value: "yes")
        fields.set(name: "X-Trace", value: "one")
        fields.removeAll(named: "content-type")
        #expect(fields.fields == [Field(name: "X-Trace", value: "one"), Field(name: "Added", value: "yes")])
        #expect(rawLines(fields) == ["X-Trace: one", "Added: yes"])
    }

    @Test("locations may skip bytes and leave fields out")
    func validatedStorageSubset() {
        let fields = HTTPFields(validatedStorage: Self.section, locations: [Self.sectionLocations[2], Self.sectionLocations[0]])
        #expect(fields.fields == [Field(name: "x-trace", value: "def"), Field(name: "Content-Type", value: "text/html")])
    }
}

/// The name bits that let a lookup of an absent name answer without comparing names: they
/// must never hide a field that is there, however the fields were made or changed.
@Suite("HTTPFields name bits")
struct HTTPFieldsNameBitsTests {
    /// Names with every first and every last byte a token may have (the last ones in another
    /// order: 5 and the 77 tchars have no common factor), of lengths 2 to 40, and every tchar
    /// but the capitals (the same names as the small letters) as a name of one byte.
    private static let names: [String] = {
        let tchars = Array("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
        let longer = tchars.indices.map { index in
            let first = tchars[index], last = tchars[(index * 5 + 3) % tchars.count]
            return String(first) + String(repeating: "n", count: index % 39) + String(last)
        }
        return longer + tchars.filter { !$0.isUppercase }.map { String($0) }
    }()

    private func expectAllFound(_ fields: HTTPFields, _ names: [String], _ label: String) {
        for name in names {
            #expect(fields.contains(name), "\(label): \(name)")
            #expect(fields.contains(name.lowercased()), "\(label): \(name)")
            #expect(fields.contains(name.uppercased()), "\(label): \(name)")
            #expect(fields.combined(name) != nil && !fields.values(name).isEmpty, "\(label): \(name)")
        }
    }

    @Test("appended names are found in any case; a name never added is not")
    func appended() {
        var fields = HTTPFields()
        for name in Self.names { fields.append(name: name, value: "v") }
        expectAllFound(fields, Self.names, "appended")
        #expect(!fields.contains("Absent-Name"))
        #expect(fields.combined("Absent-Name") == nil)
    }

    @Test("fields adopted from storage compute their bits")
    func adopted() {
        var source = HTTPFields()
        for name in Self.names { source.append(name: name, value: "value") }
        var storage: [UInt8] = []
        var locations: [HTTPFields.Location] = []
        for name in Self.names {
            let nameStart = storage.count
            storage += Array(name.utf8)
            let valueStart = storage.count
            storage += Array("value".utf8)
            locations.append(HTTPFields.Location(name: nameStart..<valueStart, value: valueStart..<storage.count))
        }
        let adopted = HTTPFields(validatedStorage: storage, locations: locations)
        #expect(adopted == source)
        expectAllFound(adopted, Self.names, "adopted")
    }

    @Test("removing and setting fields keeps every remaining name found")
    func changed() {
        var fields = HTTPFields()
        for name in Self.names { fields.append(name: name, value: "v") }
        let removed = Self.names.enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
        for name in removed { fields.removeAll(named: name) }
        for name in removed { #expect(!fields.contains(name), "\(name)") }
        let kept = Self.names.filter { !removed.contains($0) }
        expectAllFound(fields, kept, "after removal")
        fields.set(name: removed[0], value: "again")
        #expect(fields.first(removed[0]) == "again")
        expectAllFound(fields, kept + [removed[0]], "after set")
    }
}
